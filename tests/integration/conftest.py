"""One live ``anna serve`` per test session, on a free loopback port, over a tiny random Qwen3.5."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

MODEL_NAME = "tiny-qwen35"
MAX_MODEL_LEN = 512
START_TIMEOUT_S = 180


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    """A running ``anna serve`` subprocess."""

    def __init__(self, proc: subprocess.Popen, base_url: str, model_dir: Path, log_path: Path):
        self.proc = proc
        self.base_url = base_url
        self.model_dir = model_dir
        self.log_path = log_path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)


@pytest.fixture(scope="session")
def tiny_qwen35_dir(tmp_path_factory) -> Path:
    from anna_core.testing.checkpoints import build_tiny_qwen35

    return build_tiny_qwen35(tmp_path_factory.mktemp("tiny-qwen35-serve"))


REPO_ROOT = Path(__file__).resolve().parents[2]


def start_server(args: list[str], log_dir: Path, model_dir: Path | None = None,
                 module: str = "anna_cli.main") -> LiveServer:
    """Start ``anna serve ARGS`` on a free loopback port and wait until ``/health`` is 200.

    ``module`` is the ``python -m`` entry (another one may register test plugins before calling the
    ``anna`` CLI; it runs from the repository root, so ``tests.*`` modules import)."""
    port = _free_port()
    log_path = log_dir / "serve.log"
    cmd = [sys.executable, "-m", module, "serve", *args, "--host", "127.0.0.1", "--port", str(port),
           "--device", "cpu", "--threads", "2", "--log-level", "info"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT)
    server = LiveServer(proc, f"http://127.0.0.1:{port}", model_dir, log_path)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            pytest.fail(f"anna serve exited with {proc.returncode} before becoming ready:\n{server.log()}")
        try:
            if httpx.get(f"{server.base_url}/health", timeout=2).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            server.stop(timeout=10)
            pytest.fail(f"anna serve not ready after {START_TIMEOUT_S} s:\n{server.log()}")
        time.sleep(0.2)


def kill(server: LiveServer) -> None:
    if server.proc.poll() is None:
        server.proc.kill()
        server.proc.wait(timeout=10)


@pytest.fixture(scope="session")
def live_server(tiny_qwen35_dir, tmp_path_factory) -> LiveServer:
    server = start_server(["--model-dir", str(tiny_qwen35_dir), "--model-name", MODEL_NAME,
                           "--max-model-len", str(MAX_MODEL_LEN)],
                          tmp_path_factory.mktemp("serve-log"), tiny_qwen35_dir)
    yield server
    kill(server)
