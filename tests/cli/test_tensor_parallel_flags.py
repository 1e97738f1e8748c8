"""``--tensor-parallel-size`` of ``anna serve`` / ``generate`` / ``bench``: offered, validated before anything loads
(the group itself is tested per family: ``tests/*/test_*tensor_parallel.py``)."""

from __future__ import annotations

import pytest
from anna_cli.main import build_cli
from click.testing import CliRunner


@pytest.mark.parametrize("command", ["serve", "generate", "bench"])
def test_flag_is_offered_and_must_be_positive(command, tmp_path):
    cli = build_cli()
    assert "--tensor-parallel-size" in CliRunner().invoke(cli, [command, "--help"]).output
    result = CliRunner().invoke(cli, [command, "--model-dir", str(tmp_path), "--tensor-parallel-size", "0"])
    assert result.exit_code == 2 and "--tensor-parallel-size" in result.output


def test_bench_refuses_rank_0_only_measurements(tmp_path):
    result = CliRunner().invoke(build_cli(), ["bench", "--model-dir", str(tmp_path), "--tensor-parallel-size", "2",
                                              "--compare-hf"])
    assert result.exit_code == 1
    assert "--tensor-parallel-size above 1" in result.output and "--compare-hf" in result.output
