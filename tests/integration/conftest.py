"""One live ``anna serve`` per test session, on a free loopback port, over a tiny random Qwen3.5."""

from __future__ import annotations

from pathlib import Path

import pytest
from anna_core.testing.live_server import LiveServer, ServerNotReadyError
from anna_core.testing.live_server import start_server as _start

MODEL_NAME = "tiny-qwen35"
MAX_MODEL_LEN = 512


@pytest.fixture(scope="session")
def tiny_qwen35_dir(tmp_path_factory) -> Path:
    from anna_core.testing.checkpoints import build_tiny_qwen35

    return build_tiny_qwen35(tmp_path_factory.mktemp("tiny-qwen35-serve"))


REPO_ROOT = Path(__file__).resolve().parents[2]


def start_server(args: list[str], log_dir: Path, model_dir: Path | None = None,
                 module: str = "anna_cli.main") -> LiveServer:
    """:func:`anna_core.testing.live_server.start_server` from the repository root (so ``tests.*`` modules
    import), failing the test when the server does not come up."""
    try:
        return _start(args, log_dir, model_dir, module=module, cwd=REPO_ROOT)
    except ServerNotReadyError as e:
        pytest.fail(str(e))


def kill(server: LiveServer) -> None:
    server.kill()


@pytest.fixture(scope="session")
def live_server(tiny_qwen35_dir, tmp_path_factory) -> LiveServer:
    server = start_server(["--model-dir", str(tiny_qwen35_dir), "--model-name", MODEL_NAME,
                           "--max-model-len", str(MAX_MODEL_LEN)],
                          tmp_path_factory.mktemp("serve-log"), tiny_qwen35_dir)
    yield server
    kill(server)
