"""``anna serve`` start-up failures and log formats (in-process; the live server is in tests/integration)."""

from __future__ import annotations

import json
import logging
import shutil
import socket
import time

import pytest
from anna_cli.logging_setup import configure_logging
from anna_cli.main import build_cli
from click.testing import CliRunner


@pytest.fixture(autouse=True)
def restore_root_logger():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from anna_core.testing.checkpoints import build_tiny_qwen35

    return build_tiny_qwen35(tmp_path_factory.mktemp("tiny-qwen35-serve-cli"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unknown_model_type_fails_before_listening(tiny_dir, tmp_path):
    config = json.loads((tiny_dir / "config.json").read_text())
    config.update(model_type="mamba9", architectures=["Mamba9ForCausalLM"])
    (tmp_path / "config.json").write_text(json.dumps(config))
    result = CliRunner().invoke(build_cli(), ["serve", "--model-dir", str(tmp_path), "--port", str(_free_port())])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines()[-1].startswith("error: model_type 'mamba9'")
    assert "Uvicorn running" not in result.stderr


def test_background_load_failure_exits_1(tiny_dir, tmp_path):
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_dir / name, tmp_path / name)
    result = CliRunner().invoke(build_cli(), ["serve", "--model-dir", str(tmp_path), "--port", str(_free_port()),
                                              "--log-format", "json"])
    assert result.exit_code == 1
    records = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    errors = [r for r in records if r["level"] == "error" and r["logger"] == "anna.serve"]
    assert len(errors) == 1 and "could not load the model" in errors[0]["message"]
    assert "safetensors" in errors[0]["message"]


def test_a_broken_chat_template_fails_the_start_with_its_error(tiny_dir, tmp_path):
    template = tmp_path / "broken.jinja"
    template.write_text("{% for m in messages %}{{ m.content | no_such_filter }}{% endfor %}")
    result = CliRunner().invoke(build_cli(), ["serve", "--model-dir", str(tiny_dir), "--port", str(_free_port()),
                                              "--chat-template", str(template), "--log-format", "json"])
    assert result.exit_code == 1
    records = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    errors = [r for r in records if r["level"] == "error"]
    assert len(errors) == 1, errors
    message = errors[0]["message"]
    assert "--chat-template" in message and "no_such_filter" in message and "\n" not in message
    assert not any("model tiny" in r["message"] and "ready" in r["message"] for r in records)
    assert "Traceback" not in result.stderr


def test_json_log_lines(capsys):
    configure_logging("info", "json")
    logging.getLogger("anna.test").info("hello %s", "there")
    logging.getLogger("anna.test").debug("hidden")
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert (record["level"], record["logger"], record["message"]) == ("info", "anna.test", "hello there")
    assert record["ts"].endswith("Z")


def test_port_out_of_range_is_a_one_line_usage_error(tiny_dir):
    result = CliRunner().invoke(build_cli(), ["serve", "--model-dir", str(tiny_dir), "--port", "99999"])
    assert result.exit_code == 2
    assert "Invalid value for '--port'" in result.stderr and "65535" in result.stderr
    assert isinstance(result.exception, SystemExit)  # click's usage error, not an OverflowError


def test_busy_port_prints_one_error_line_and_exits_1(tiny_dir):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = CliRunner().invoke(build_cli(), ["serve", "--model-dir", str(tiny_dir), "--port", str(port)])
    assert result.exit_code == 1, result.output
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: could not start the server on 127.0.0.1:{port} (see the log above)")
    assert "Traceback" not in result.stderr


def test_unknown_disabled_kernel_fails_before_listening(tiny_dir):
    result = CliRunner().invoke(build_cli(), ["serve", "--model-dir", str(tiny_dir), "--port", str(_free_port()),
                                              "--disable-kernel", "rms_norm:nope"])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines()[-1].startswith("error: cannot disable kernel 'rms_norm:nope'")
    assert "Uvicorn running" not in result.stderr


def test_a_sigint_during_start_up_stops_a_server_that_inherited_sigint_ignored(tiny_dir, monkeypatch):
    import os
    import signal

    import uvicorn
    from anna_cli.main import main

    def config(*args, **kwargs):  # still starting: uvicorn has not taken the signals over yet
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(100):  # the handler runs between bytecodes of the main thread
            time.sleep(0.01)
        raise AssertionError("the SIGINT was lost: the server went on starting")

    monkeypatch.setattr(uvicorn, "Config", config)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a script's background job inherits it
    try:
        with pytest.raises(SystemExit) as stopped:
            main(["serve", "--model-dir", str(tiny_dir), "--device", "cpu", "--port", str(_free_port())])
    finally:
        signal.signal(signal.SIGINT, previous)
    assert stopped.value.code == 130
