"""``anna quant-cache inspect|build|clear --model-dir DIR`` (issue 29) on a small FP8 block-scaled checkpoint, the
cache root in a temporary ``ANNA_CACHE_DIR``."""

from __future__ import annotations

import json

import pytest
import torch
from anna_cli.main import build_cli
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

FP8 = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}


@pytest.fixture
def cache_root(tmp_path, monkeypatch):
    monkeypatch.setenv("ANNA_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _checkpoint(path, quantization_config=FP8):
    path.mkdir()
    w = (torch.randn(256, 128, generator=torch.Generator().manual_seed(0)) * 20).to(torch.float8_e4m3fn)
    save_file({"layers.0.proj.weight": w, "layers.0.proj.weight_scale_inv": torch.full((2, 1), 0.5)},
              str(path / "model.safetensors"))
    config = {"model_type": "qwen3", "torch_dtype": "bfloat16"}
    if quantization_config is not None:
        config["quantization_config"] = quantization_config
    (path / "config.json").write_text(json.dumps(config))
    return path


def invoke(*args):
    result = CliRunner().invoke(build_cli(), ["quant-cache", *args])
    return result.exit_code, result.output


def test_inspect_build_clear(tmp_path, cache_root):
    ckpt = str(_checkpoint(tmp_path / "ckpt"))
    code, out = invoke("inspect", "--model-dir", ckpt, "--device", "cuda")
    assert code == 0, out
    info = json.loads(out)
    assert info["quantization"]["method"] == "fp8" and info["quantization"]["kind"] == "fp8-block"
    assert (info["cached"], info["entries"], info["dtype"]) == (False, [], "bfloat16")  # the checkpoint's dtype on cuda
    assert info["cache_root"] == str(cache_root / "quant-layouts")
    code, out = invoke("build", "--model-dir", ckpt, "--device", "cuda")
    assert code == 0, out
    built = json.loads(out)
    assert (built["state"], built["layers"], built["entry"]) == ("built", 1, info["entry"])
    assert json.loads(invoke("build", "--model-dir", ckpt, "--device", "cuda")[1])["state"] == "hit"
    info = json.loads(invoke("inspect", "--model-dir", ckpt, "--device", "cuda")[1])
    assert info["cached"] and [e["path"] for e in info["entries"]] == [built["entry"]]
    assert not json.loads(invoke("inspect", "--model-dir", ckpt, "--device", "cpu")[1])["cached"]  # float32 on cpu
    code, out = invoke("clear", "--model-dir", ckpt)
    assert code == 0 and json.loads(out)["removed"] == 1
    assert json.loads(invoke("inspect", "--model-dir", ckpt, "--device", "cuda")[1])["entries"] == []


def test_clear_all_removes_other_checkpoints_entries(tmp_path, cache_root):
    a, b = str(_checkpoint(tmp_path / "a")), str(_checkpoint(tmp_path / "b"))
    for ckpt in (a, b):
        assert invoke("build", "--model-dir", ckpt, "--device", "cpu")[0] == 0
    assert json.loads(invoke("clear", "--model-dir", a)[1])["removed"] == 1
    assert json.loads(invoke("clear", "--model-dir", a, "--all")[1])["removed"] == 1


@pytest.mark.parametrize(("config", "message"), [
    (None, "has no quantization_config"),
    ({"quant_method": "bitsandbytes"}, "quant_method 'bitsandbytes' is not supported"),
    ({"quant_method": "gptq", "bits": 4, "group_size": None}, "quantization_config.group_size must be an integer"),
    ({"quant_method": "fp8", "weight_block_size": 128}, "quantization_config.weight_block_size must be a list"),
])
def test_errors_are_one_line_not_tracebacks(tmp_path, cache_root, config, message):
    ckpt = str(_checkpoint(tmp_path / "ckpt", config))
    for command in ("inspect", "build", "clear"):
        code, out = invoke(command, "--model-dir", ckpt)
        assert code == 1 and message in out and "Traceback" not in out, out


def test_a_truncated_checkpoint_is_a_one_line_error_and_its_entries_can_be_cleared(tmp_path, cache_root):
    ckpt = _checkpoint(tmp_path / "ckpt")
    assert invoke("build", "--model-dir", str(ckpt), "--device", "cpu")[0] == 0
    (ckpt / "model.safetensors").write_bytes((ckpt / "model.safetensors").read_bytes()[:4])
    for command in ("inspect", "build"):
        code, out = invoke(command, "--model-dir", str(ckpt), "--device", "cpu")
        assert code == 1 and "cannot read safetensors file" in out and "Traceback" not in out, out
        assert len(out.strip().splitlines()) == 1, out
    code, out = invoke("clear", "--model-dir", str(ckpt))
    assert code == 0 and json.loads(out.strip().splitlines()[-1])["removed"] == 1, out


def test_act_order_gptq_entry_keeps_its_column_order(tmp_path, cache_root):
    """``build`` of an act-order GPTQ checkpoint stores each layer's ``perm``; the next load reads it back (a hit)
    and a corrupted ``perm`` is rebuilt, not served."""
    from anna_core.testing.prequant_checkpoints import act_order_int4, gptq_tensors
    from anna_core.weights.layout_cache import LayoutCache
    from anna_core.weights.prequant import read_quantization_config
    from anna_core.weights.prequant_loader import read_prequantized
    from anna_core.weights.safetensors_loader import checkpoint_files

    qc = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": True, "sym": False}
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    w = torch.randn(64, 256, generator=torch.Generator().manual_seed(0))
    perm = torch.randperm(256, generator=torch.Generator().manual_seed(1))
    q, z, s, g_idx = act_order_int4(w, perm, 128, False, torch.Generator().manual_seed(2), 1)
    save_file({f"layers.0.proj.{k}": v for k, v in gptq_tensors(q, z, s, 128, True, g_idx).items()},
              str(ckpt / "model.safetensors"))
    (ckpt / "config.json").write_text(json.dumps({"model_type": "qwen3", "torch_dtype": "float32",
                                                  "quantization_config": qc}))
    code, out = invoke("build", "--model-dir", str(ckpt), "--device", "cpu")
    assert code == 0, out
    entry = json.loads(out)["entry"]
    assert json.loads((tmp_path / entry / "entry.json").read_text())["permuted"] == ["layers.0.proj"]
    cfg = read_quantization_config(json.loads((ckpt / "config.json").read_text()))
    files = checkpoint_files(ckpt)
    fresh, _ = read_prequantized(files, cfg, device_kind="cpu", dtype=torch.float32, cache=None)
    cached, state = read_prequantized(files, cfg, device_kind="cpu", dtype=torch.float32, cache=LayoutCache())
    assert state == "hit" and fresh["layers.0.proj"].perm is not None
    for name in ("qweight", "scale", "zero", "perm"):
        assert torch.equal(getattr(cached["layers.0.proj"], name), getattr(fresh["layers.0.proj"], name)), name
    weights = tmp_path / entry / "weights.safetensors"
    stored = load_file(str(weights))
    stored["layers.0.proj.perm"] = torch.zeros(256, dtype=torch.int64)  # not a permutation
    save_file(stored, str(weights))
    again, state = read_prequantized(files, cfg, device_kind="cpu", dtype=torch.float32, cache=LayoutCache())
    assert state == "built" and torch.equal(again["layers.0.proj"].perm, fresh["layers.0.proj"].perm)
