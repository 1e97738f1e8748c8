"""``anna generate`` and ``anna serve`` pick the family's task through ``register_tasks`` and refuse,
in one line and before loading, what they cannot run (the test ``echo`` family of
:mod:`tests.server.echo_task`)."""

from __future__ import annotations

import socket

import pytest
from anna_cli.main import build_cli
from anna_core.plugins import get_plugin_manager
from click.testing import CliRunner

from tests.server.echo_task import echo_registered, write_checkpoint


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def echo_dir(tmp_path):
    return write_checkpoint(tmp_path / "echo")


def one_line_error(result) -> str:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("error: "), result.stderr
    assert "Uvicorn running" not in result.stderr
    return lines[-1]


def test_generate_refuses_a_family_without_the_generate_task(echo_dir):
    with echo_registered(get_plugin_manager()):
        result = CliRunner().invoke(build_cli(), ["generate", "--model-dir", str(echo_dir), "--prompt", "hi"])
    assert one_line_error(result) == "error: the 'echo_test' family serves the task(s) echo, not 'generate'"


def test_serve_refuses_a_task_no_plugin_installs_before_listening(echo_dir):
    with echo_registered(get_plugin_manager(), task=False):
        result = CliRunner().invoke(build_cli(), ["serve", "--model-dir", str(echo_dir), "--port", str(_free_port())])
    line = one_line_error(result)
    assert "needs the task 'echo', which no installed plugin registers" in line and "anna-echo-test" in line


def test_serve_refuses_a_task_the_family_does_not_serve(echo_dir):
    with echo_registered(get_plugin_manager()):
        result = CliRunner().invoke(build_cli(), ["serve", "--model-dir", str(echo_dir), "--task", "generate",
                                                  "--port", str(_free_port())])
    assert one_line_error(result) == "error: the 'echo_test' family serves the task(s) echo, not 'generate'"
