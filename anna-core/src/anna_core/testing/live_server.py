"""A real ``anna serve`` subprocess on a free loopback port, for end-to-end tests of a plugin.

The server is started as ``python -m anna_cli.main serve ...`` (the ``anna`` command of the anna-cli
distribution; anna-core does not import it) with ``--device cpu``, offline, and is ready when ``GET /health``
answers 200. Its combined output goes to a log file that the failure messages quote.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

START_TIMEOUT_S = 180.0


class ServerNotReadyError(RuntimeError):
    """The server exited, or did not answer ``/health`` with 200 in time; the message quotes its log."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    """A running ``anna serve`` subprocess.

    Attributes:
        proc: the process; base_url: ``http://127.0.0.1:PORT``; model_dir: what it serves (None: the
        default model); log_path: its combined stdout and stderr.
    """

    def __init__(self, proc: subprocess.Popen, base_url: str, model_dir: Path | None, log_path: Path):
        self.proc = proc
        self.base_url = base_url
        self.model_dir = model_dir
        self.log_path = log_path

    def log(self) -> str:
        """The server's output so far."""
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM (a graceful drain), then wait; returns the exit code.

        Raises:
            subprocess.TimeoutExpired: it did not exit within ``timeout`` seconds.
        """
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        """SIGKILL if still running, then reap it."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def start_server(args: list[str], log_dir: Path, model_dir: Path | None = None, *, module: str = "anna_cli.main",
                 cwd: Path | None = None, timeout_s: float = START_TIMEOUT_S) -> LiveServer:
    """Start ``anna serve ARGS --device cpu`` on a free loopback port and wait until ``/health`` is 200.

    Args:
        args: ``anna serve`` arguments (``--model-dir ...`` and flags; host, port, device, threads and log
            level are added).
        log_dir: where ``serve.log`` goes.
        model_dir: recorded on the result (for the test's own use).
        module: the ``python -m`` entry (a test module may register extra plugins before calling the CLI).
        cwd: the server's working directory (e.g. a repository root, so ``tests.*`` modules import).
        timeout_s: how long to wait for readiness.

    Raises:
        ModuleNotFoundError: anna-cli (``module``) is not installed.
        ServerNotReadyError: the server exited first, or was not ready within ``timeout_s`` (then it is killed).
    """
    if importlib.util.find_spec(module.split(".")[0]) is None:
        raise ModuleNotFoundError(f"{module} is not installed: the live server needs anna-cli (pip install anna-cli)")
    port = free_port()
    log_path = Path(log_dir) / "serve.log"
    cmd = [sys.executable, "-m", module, "serve", *args, "--host", "127.0.0.1", "--port", str(port),
           "--device", "cpu", "--threads", "2", "--log-level", "info"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    server = LiveServer(proc, f"http://127.0.0.1:{port}", model_dir, log_path)
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise ServerNotReadyError(f"anna serve exited with {proc.returncode} before becoming ready:\n{server.log()}")
        try:
            if httpx.get(f"{server.base_url}/health", timeout=2).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            server.kill()
            raise ServerNotReadyError(f"anna serve not ready after {timeout_s:.0f} s:\n{server.log()}")
        time.sleep(0.2)
