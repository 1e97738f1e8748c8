"""The layout cache of pre-quantized checkpoints (issue 29, :mod:`anna_core.weights.layout_cache`): an entry is
built once and read back equal; a changed checkpoint misses; a corrupt entry is rebuilt; an unwritable cache
falls back to repacking in memory with a warning; entries are listed and cleared per checkpoint."""

from __future__ import annotations

import json
import logging
import os

import pytest
import torch
from anna_core.testing.prequant_checkpoints import awq_tensors, gptq_tensors, rtn_int4
from anna_core.weights.layout_cache import ENTRY_FILE, WEIGHTS_FILE, LayoutCache, key_material
from anna_core.weights.prequant import read_quantization_config
from anna_core.weights.prequant_loader import build_cache_entry, read_prequantized
from anna_core.weights.safetensors_loader import checkpoint_files
from safetensors.torch import load_file, save_file

FP8 = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}


def fp8_checkpoint(path, seed=0):
    """A folder with two FP8 block-scaled linears (``[200, 256]`` and ``[128, 200]``) and a dense norm."""
    path.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, (n, k) in {"layers.0.up": (200, 256), "layers.0.down": (128, 200)}.items():
        tensors[f"{name}.weight"] = (torch.randn(n, k, generator=gen) * 50).to(torch.float8_e4m3fn)
        tensors[f"{name}.weight_scale_inv"] = torch.rand(-(-n // 128), -(-k // 128), generator=gen) + 0.01
    tensors["norm.weight"] = torch.ones(256)
    save_file(tensors, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps({"model_type": "toy", "quantization_config": FP8}))
    return path, tensors


def int4_checkpoint(path, layout):
    """A folder with one GPTQ (v1) or AWQ linear ``[48, 256]``, group size 128."""
    path.mkdir(parents=True, exist_ok=True)
    w = torch.randn(48, 256, generator=torch.Generator().manual_seed(0))
    q, z, s = rtn_int4(w, 128, False, torch.Generator().manual_seed(1), 1 if layout == "gptq" else 0)
    tensors = gptq_tensors(q, z, s, 128, True) if layout == "gptq" else awq_tensors(q, z, s)
    save_file({f"layers.0.up.{k}": v for k, v in tensors.items()}, str(path / "model.safetensors"))
    qc = {"quant_method": layout, "bits": 4, "group_size": 128}
    (path / "config.json").write_text(json.dumps({"model_type": "toy", "quantization_config": qc}))
    return path


def _read(path, cache, dtype=torch.bfloat16, device_kind="cuda"):
    cfg = read_quantization_config(json.loads((path / "config.json").read_text()))
    return read_prequantized(checkpoint_files(path), cfg, device_kind=device_kind, dtype=dtype, cache=cache)


def test_built_then_hit_with_equal_tensors(tmp_path):
    ckpt, tensors = fp8_checkpoint(tmp_path / "ckpt")
    cache = LayoutCache(tmp_path / "cache")
    built, state = _read(ckpt, cache)
    assert state == "built" and set(built) == {"layers.0.up", "layers.0.down"}
    hit, state = _read(ckpt, cache)
    assert state == "hit"
    for prefix in built:
        assert torch.equal(hit[prefix].qweight.view(torch.uint8), tensors[f"{prefix}.weight"].view(torch.uint8))
        assert torch.equal(hit[prefix].scale, tensors[f"{prefix}.weight_scale_inv"]) and hit[prefix].scheme == "fp8"
    assert sorted(p.name for p in ckpt.iterdir()) == ["config.json", "model.safetensors"]  # nothing written there


def test_key_covers_mtime_device_dtype_and_method(tmp_path):
    ckpt, _ = fp8_checkpoint(tmp_path / "ckpt")
    cache = LayoutCache(tmp_path / "cache")
    assert _read(ckpt, cache)[1] == "built"
    assert _read(ckpt, cache, device_kind="xpu")[1] == "built"
    assert _read(ckpt, cache, dtype=torch.float16)[1] == "built"
    st = (ckpt / "model.safetensors").stat()
    os.utime(ckpt / "model.safetensors", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert _read(ckpt, cache)[1] == "built"
    assert len(cache.entries()) == 3  # the changed file's entry replaced the older cuda / bfloat16 one
    cfg = read_quantization_config(json.loads((ckpt / "config.json").read_text()))
    material = key_material([ckpt / "model.safetensors"], cfg, "cuda", torch.bfloat16)
    assert material["sources"][0]["size"] == st.st_size and len(material["sources"][0]["header_sha256"]) == 64
    assert material["method"]["layout"] == "fp8" and material["device"] == "cuda" and material["dtype"] == "bfloat16"
    assert set(material["versions"]) == {"torch", "safetensors", "anna-core"}


@pytest.mark.parametrize("damage", ["weights", "entry"])
def test_corrupt_entry_is_rebuilt_with_a_warning(tmp_path, caplog, damage):
    ckpt, _ = fp8_checkpoint(tmp_path / "ckpt")
    cache = LayoutCache(tmp_path / "cache")
    _read(ckpt, cache)
    (entry,) = [p for p in (tmp_path / "cache").iterdir()]
    if damage == "weights":
        (entry / WEIGHTS_FILE).write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    else:
        meta = json.loads((entry / ENTRY_FILE).read_text())
        (entry / ENTRY_FILE).write_text(json.dumps({**meta, "prefixes": ["other"]}))
    with caplog.at_level(logging.WARNING, "anna.weights"):
        weights, state = _read(ckpt, cache)
    assert state == "built" and "unreadable" in caplog.text and len(weights) == 2
    assert _read(ckpt, cache)[1] == "hit"


def test_unwritable_cache_falls_back_to_memory_with_a_warning(tmp_path, caplog):
    ckpt, tensors = fp8_checkpoint(tmp_path / "ckpt")
    (tmp_path / "cache").write_text("a file, not a folder")
    with caplog.at_level(logging.WARNING, "anna.weights"):
        weights, state = _read(ckpt, LayoutCache(tmp_path / "cache"))
    assert state == "unwritable" and "cannot write the layout cache" in caplog.text
    assert torch.equal(weights["layers.0.up"].scale, tensors["layers.0.up.weight_scale_inv"])
    assert _read(ckpt, None)[1] == "off"


def test_default_root_is_under_anna_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ANNA_CACHE_DIR", str(tmp_path / "root"))
    ckpt, _ = fp8_checkpoint(tmp_path / "ckpt")
    cfg = read_quantization_config(json.loads((ckpt / "config.json").read_text()))
    entry, state, layers = build_cache_entry(ckpt, cfg, device_kind="cpu", dtype=torch.float32, cache=LayoutCache())
    assert (state, layers) == ("built", 2) and entry.parent == tmp_path / "root" / "quant-layouts"
    assert (entry / ENTRY_FILE).is_file() and not list(ckpt.glob("*cache*"))


def test_entries_and_clear_per_checkpoint(tmp_path):
    a, _ = fp8_checkpoint(tmp_path / "a")
    b, _ = fp8_checkpoint(tmp_path / "b", seed=1)
    cache = LayoutCache(tmp_path / "cache")
    _read(a, cache)
    _read(b, cache)
    listed = cache.entries()
    assert len(listed) == 2 and {e["kind"] for e in listed} == {"fp8-block"} and all(e["layers"] == 2 for e in listed)
    assert cache.clear([a / "model.safetensors"]) == 1
    assert [e["sources"] for e in cache.entries()] == [[str((b / "model.safetensors").resolve())]]
    assert cache.clear() == 1 and cache.entries() == []


@pytest.mark.parametrize("layout", ["gptq", "awq"])
def test_int4_entries_hit_with_the_expected_layout(tmp_path, layout):
    ckpt = int4_checkpoint(tmp_path / "ckpt", layout)
    cache = LayoutCache(tmp_path / "cache")
    built, state = _read(ckpt, cache, dtype=torch.float16)
    assert state == "built" and built["layers.0.up"].shape == (48, 256)
    hit, state = _read(ckpt, cache, dtype=torch.float16)
    assert state == "hit" and hit["layers.0.up"].zero.dtype == torch.float16
    for name in ("qweight", "scale", "zero"):
        assert torch.equal(getattr(hit["layers.0.up"], name), getattr(built["layers.0.up"], name))


MIS_SHAPES = {  # the entry's tensor name -> what replaces it in a still valid safetensors file
    "qweight_row_short": ("layers.0.up.qweight", lambda t: t[:-1]),
    "scale_empty": ("layers.0.up.scale", lambda t: t[:, :0]),
    "scale_int32": ("layers.0.up.scale", lambda t: t.to(torch.int32)),
    "zero_float32": ("layers.0.up.zero", lambda t: t.float()),
    "zero_missing": ("layers.0.up.zero", None),
}


@pytest.mark.parametrize("damage", list(MIS_SHAPES))
def test_a_mis_shaped_entry_is_rebuilt_with_a_warning(tmp_path, caplog, damage):
    """A readable entry whose tensors are not what repacking the checkpoint makes (shape, dtype) is corrupt:
    removed, rebuilt, and the load gets the checkpoint's weights, not an error blaming the checkpoint."""
    ckpt = int4_checkpoint(tmp_path / "ckpt", "gptq")
    cache = LayoutCache(tmp_path / "cache")
    built, _ = _read(ckpt, cache, dtype=torch.bfloat16)
    (entry,) = (tmp_path / "cache").iterdir()
    tensors = load_file(str(entry / WEIGHTS_FILE))
    name, change = MIS_SHAPES[damage]
    if change is None:
        del tensors[name]
    else:
        tensors[name] = change(tensors[name]).contiguous()
    save_file(tensors, str(entry / WEIGHTS_FILE))
    with caplog.at_level(logging.WARNING, "anna.weights"):
        weights, state = _read(ckpt, cache, dtype=torch.bfloat16)
    assert state == "built" and "unreadable" in caplog.text and name in caplog.text
    for attr in ("qweight", "scale", "zero"):
        assert torch.equal(getattr(weights["layers.0.up"], attr), getattr(built["layers.0.up"], attr))
    assert _read(ckpt, cache, dtype=torch.bfloat16)[1] == "hit"


def test_a_new_entry_replaces_the_older_ones_of_its_files_device_and_dtype(tmp_path, monkeypatch):
    """A re-downloaded checkpoint (new mtime) or a library upgrade (new versions in the key) replaces the entry
    of the same files, device kind and dtype; the entries for other devices / dtypes and other checkpoints stay."""
    a, _ = fp8_checkpoint(tmp_path / "a")
    b, _ = fp8_checkpoint(tmp_path / "b", seed=1)
    cache = LayoutCache(tmp_path / "cache")
    _read(a, cache)
    _read(a, cache, device_kind="cpu", dtype=torch.float32)
    _read(b, cache)
    def slots():
        return sorted((e["sources"][0].split("/")[-2], e["device"], e["dtype"]) for e in cache.entries())

    before = {e["path"] for e in cache.entries()}
    fp8_checkpoint(a, seed=2)  # re-downloaded: same path, new contents and mtime
    assert _read(a, cache)[1] == "built"
    after = {e["path"] for e in cache.entries()}
    assert len(before - after) == 1 and not os.path.exists((before - after).pop())
    assert slots() == [("a", "cpu", "float32"), ("a", "cuda", "bfloat16"), ("b", "cuda", "bfloat16")]
    import anna_core.weights.layout_cache as lc

    monkeypatch.setattr(lc, "_version", lambda dist: "99.0")  # a library upgrade
    assert _read(a, cache)[1] == "built" and len(cache.entries()) == 3
    assert slots() == [("a", "cpu", "float32"), ("a", "cuda", "bfloat16"), ("b", "cuda", "bfloat16")]
    assert _read(a, cache)[1] == "hit"
