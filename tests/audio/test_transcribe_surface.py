"""Where the transcription route and its flags exist: not on a text server (404), and ``anna serve`` refuses the
``transcribe`` task's flags for a text model before loading anything."""

from __future__ import annotations

import socket

from anna_cli.main import build_cli
from anna_core.plugins import make_plugin_manager
from anna_core.server.app import create_app
from anna_core.server.state import ServerState
from click.testing import CliRunner
from litestar.testing import TestClient


def test_a_text_server_has_no_transcription_route():
    state = ServerState(model_name="text-model")
    with TestClient(create_app(state, pm=make_plugin_manager(load_entry_points=False))) as client:
        r = client.post("/v1/audio/transcriptions", files={"file": ("a.wav", b"RIFF....", "audio/wav")},
                        data={"model": "text-model"})
        assert r.status_code == 404 and "error" in r.json()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_lists_the_task_flags_and_refuses_them_for_a_text_model(tiny_checkpoint, tmp_path):
    cli = build_cli()
    names = {p.name for p in cli.commands["serve"].params}
    assert {"asr_aligner_dir", "asr_max_inference_batch_size"} <= names
    model = tiny_checkpoint("qwen3")
    for flag, value in (("--asr-aligner-dir", str(tmp_path)), ("--asr-max-inference-batch-size", "4")):
        result = CliRunner().invoke(cli, ["serve", "--model-dir", str(model), flag, value, "--port", str(_free_port())])
        assert result.exit_code == 1, result.output
        assert result.stderr.strip().splitlines()[-1] == (
            f"error: {flag} is a setting of the 'transcribe' task; this model serves 'generate'")
