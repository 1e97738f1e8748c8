"""``anna generate`` and ``anna plugins`` through click's CliRunner (in-process, no server)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from anna_cli.main import build_cli
from click.testing import CliRunner


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    from anna_core.testing.checkpoints import build_tiny_qwen35

    return build_tiny_qwen35(tmp_path_factory.mktemp("tiny-qwen35-cli"))


def run(*args: str):
    return CliRunner().invoke(build_cli(), list(args))


def assert_one_line_error(result, *needles: str) -> None:
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0]


def test_missing_weights_fail_with_a_clear_message(tiny_dir, tmp_path):
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(tiny_dir / name, tmp_path / name)
    assert_one_line_error(run("generate", "--model-dir", str(tmp_path), "--prompt", "hi"), "safetensors")


def test_missing_tensor_fails_naming_it(tiny_dir, tmp_path):
    from safetensors.torch import load_file, save_file

    shutil.copytree(tiny_dir, tmp_path / "m")
    tensors = load_file(str(tmp_path / "m" / "model.safetensors"))
    dropped = sorted(tensors)[0]
    del tensors[dropped]
    save_file(tensors, str(tmp_path / "m" / "model.safetensors"), metadata={"format": "pt"})
    assert_one_line_error(run("generate", "--model-dir", str(tmp_path / "m"), "--prompt", "hi"), dropped)


def test_unknown_model_type_fails_listing_supported(tiny_dir, tmp_path):
    config = json.loads((tiny_dir / "config.json").read_text())
    config.update(model_type="mamba9", architectures=["Mamba9ForCausalLM"])
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert_one_line_error(run("generate", "--model-dir", str(tmp_path), "--prompt", "hi"), "mamba9", "qwen3_5")


def test_generate_json_output(tiny_dir):
    from anna_core.tokenizer import Tokenizer

    result = run("generate", "--model-dir", str(tiny_dir), "--prompt", "Hello", "--raw", "--max-new-tokens", "5",
                 "--temperature", "0", "--json", "--device", "cpu")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert set(out) == {"text", "token_ids", "finish_reason", "usage", "timings"}
    tok = Tokenizer.from_pretrained(tiny_dir)
    n = len(out["token_ids"])
    assert out["usage"] == {"prompt_tokens": len(tok.encode("Hello", add_special_tokens=True)),
                            "completion_tokens": n, "total_tokens": len(tok.encode("Hello")) + n}
    assert 1 <= n <= 5 and out["finish_reason"] == ("length" if n == 5 else "stop")
    assert out["text"] == tok.decode(out["token_ids"])
    assert out["timings"]["load_s"] > 0 and out["timings"]["ttft_s"] > 0


def test_generate_streams_the_same_text(tiny_dir):
    args = ("generate", "--model-dir", str(tiny_dir), "--prompt", "Hello", "--max-new-tokens", "6",
            "--temperature", "0", "--device", "cpu")
    as_json = json.loads(run(*args, "--json").stdout)
    streamed = run(*args)
    assert streamed.exit_code == 0
    assert streamed.stdout == as_json["text"] + "\n"


def test_plugins_prints_json():
    result = run("plugins")
    assert result.exit_code == 0
    names = {p["name"] for p in json.loads(result.stdout)}
    assert {"anna_core_reference", "anna_cli"} <= names


def test_plugins_lists_families_ops_and_kernels_with_their_devices():
    by_name = {p["name"]: p for p in json.loads(run("plugins").stdout)}
    qwen = by_name["anna_qwen35"]
    assert "qwen35" in [f["name"] for f in qwen["families"]]
    assert "qwen3_5_text" in next(f for f in qwen["families"] if f["name"] == "qwen35")["model_types"]
    assert "rms_norm" in by_name["anna_core_reference"]["ops"]
    if "anna_xpu_kernels" in by_name:
        kernels = {(k["op"], k["name"]): k for k in by_name["anna_xpu_kernels"]["kernels"]}
        assert kernels[("rms_norm", "triton")]["priority"] == 100
        assert set(kernels[("gated_delta_rule_prefill", "fla")]["devices"]) == {"cuda"}
