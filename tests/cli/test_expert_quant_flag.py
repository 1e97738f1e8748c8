"""``--expert-quant`` of ``anna generate`` (the flag reaches the loader; a dense model is a one-line error)."""

from __future__ import annotations

import json

import pytest
from anna_cli.main import build_cli
from click.testing import CliRunner


def run(*args: str):
    return CliRunner().invoke(build_cli(), list(args))


@pytest.mark.slow
def test_generate_with_int8_experts_and_a_dense_model_refused(tmp_path_factory):
    from anna_core.testing.checkpoints import build_tiny_qwen35
    from anna_qwen35.tiny import build_tiny_qwen35_moe

    moe = build_tiny_qwen35_moe(tmp_path_factory.mktemp("moe"))
    args = ("--prompt", "Hello", "--raw", "--max-new-tokens", "4", "--temperature", "0", "--json", "--device", "cpu")
    dense_experts = json.loads(run("generate", "--model-dir", str(moe), *args).stdout)["token_ids"]
    result = run("generate", "--model-dir", str(moe), "--expert-quant", "int8", *args)
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)["token_ids"]) == len(dense_experts) == 4

    refused = run("generate", "--model-dir", str(build_tiny_qwen35(tmp_path_factory.mktemp("dense"))),
                  "--expert-quant", "int8", *args)
    assert refused.exit_code == 1 and "Traceback" not in refused.output
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "no routed experts" in lines[0], refused.stderr
    assert run("generate", "--model-dir", str(moe), "--expert-quant", "int3", *args).exit_code == 2  # click's usage
