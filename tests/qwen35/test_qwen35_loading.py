"""Qwen3.5 weight loading: layouts, ignored tensors, errors naming tensors, dummy weights, defaults."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from anna_core.errors import ModelLoadError, UnsupportedModelError
from anna_core.testing.checkpoints import copy_with_tensors
from anna_core.testing.oracle import hf_model, hf_reference_logits
from anna_core.testing.runner import prefill_logits
from anna_core.weights.safetensors_loader import checkpoint_files
from safetensors import safe_open

from tests.qwen35.conftest import load_anna, rel_err

REFERENCE_CONFIGS = Path(__file__).parent / "reference_configs"
A_LOG = "model.layers.0.linear_attn.A_log"


@pytest.fixture(scope="module")
def text_ckpt(anna_tiny_qwen35_factory) -> Path:
    return anna_tiny_qwen35_factory(layout="text", tie=True)


def test_mtp_and_visual_tensors_are_ignored(anna_tiny_qwen35_factory):
    path = anna_tiny_qwen35_factory(layout="vl", tie=False, max_shard_size="100KB", mtp=True)
    names = checkpoint_files(path)
    assert (path / "model.safetensors.index.json").is_file() and len(set(names.values())) > 2
    assert any(n.startswith("mtp.") for n in names) and any(n.startswith("model.visual.") for n in names)
    model = load_anna(path).model
    params = dict(model.named_parameters())
    assert not any("mtp" in n or "visual" in n for n in params)
    with safe_open(str(names[A_LOG.replace("model.", "model.language_model.", 1)]), "pt") as f:
        expected = f.get_tensor(A_LOG.replace("model.", "model.language_model.", 1))
    assert torch.equal(params[A_LOG], expected)
    assert params[A_LOG].dtype == torch.float32


def test_missing_tensor_is_named(text_ckpt, tmp_path):
    bad = copy_with_tensors(text_ckpt, tmp_path / "m", lambda t: t.pop(A_LOG))
    with pytest.raises(ModelLoadError, match="missing tensors.*" + A_LOG.replace(".", r"\.")):
        load_anna(bad)


def test_unexpected_tensor_is_named(text_ckpt, tmp_path):
    def add(t):
        t["model.layers.0.linear_attn.extra_proj.weight"] = torch.zeros(2, 2)

    bad = copy_with_tensors(text_ckpt, tmp_path / "u", add)
    with pytest.raises(ModelLoadError, match=r"unexpected tensors.*model\.layers\.0\.linear_attn\.extra_proj\.weight"):
        load_anna(bad)


def test_shape_mismatch_is_named(text_ckpt, tmp_path):
    def shrink(t):
        t["model.norm.weight"] = t["model.norm.weight"][:-1].clone()

    bad = copy_with_tensors(text_ckpt, tmp_path / "s", shrink)
    with pytest.raises(ModelLoadError, match=r"shape mismatches: model\.norm\.weight: checkpoint \[63\] vs model \[64\]"):
        load_anna(bad)


def test_untied_checkpoint_without_lm_head_fails(anna_tiny_qwen35_factory, tmp_path):
    src = anna_tiny_qwen35_factory(layout="text", tie=False)
    bad = copy_with_tensors(src, tmp_path / "h", lambda t: t.pop("lm_head.weight"))
    with pytest.raises(ModelLoadError, match=r"missing tensors.*lm_head\.weight"):
        load_anna(bad)


def test_folder_without_weights_fails_unless_dummy(text_ckpt, tmp_path):
    cfg_only = tmp_path / "cfg"
    cfg_only.mkdir()
    shutil.copy(text_ckpt / "config.json", cfg_only / "config.json")
    with pytest.raises(ModelLoadError, match="no \\*.safetensors"):
        load_anna(cfg_only)
    loaded = load_anna(cfg_only, load_format="dummy")
    assert loaded.tokenizer is None
    params = dict(loaded.model.named_parameters())
    assert not any(p.is_meta for p in params.values())
    a = params[A_LOG]
    assert a.dtype == torch.float32 and bool(((a >= 0) & (a < torch.log(torch.tensor(16.0)))).all())
    assert torch.equal(params["model.norm.weight"], torch.zeros(64))  # zero-centred identity
    logits = prefill_logits(loaded.model, list(range(3, 40)))
    assert torch.isfinite(logits).all() and logits.std() > 0


def test_moe_config_selects_this_family_and_unsupported_moe_options_are_clear_errors(tmp_path):
    from anna_core.model_dir import inspect_model_dir, select_family
    from anna_core.plugins import model_families

    config = json.loads((REFERENCE_CONFIGS / "Qwen3.5-35B-A3B" / "config.json").read_text())
    config["text_config"]["mlp_only_layers"] = [0]  # dense layers: transformers' Qwen3_5Moe has none
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert select_family(inspect_model_dir(tmp_path), model_families()).name == "qwen35"
    with pytest.raises(UnsupportedModelError, match=r"mlp_only_layers \[0\] .* not supported"):
        load_anna(tmp_path, load_format="dummy")


def test_generation_defaults_tokenizer_and_limits(text_ckpt):
    loaded = load_anna(text_ckpt)
    assert loaded.generation.eos_token_ids == [2, 0]
    assert loaded.max_model_len == 4096 and loaded.family == "qwen35"
    text = loaded.tokenizer.apply_chat_template([{"role": "user", "content": "Hello"}], enable_thinking=False)
    assert text == "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    ids = loaded.tokenizer.encode(text)
    assert ids[0] == 1 and 2 in ids and loaded.tokenizer.decode(ids, skip_special_tokens=False) == text


def test_generation_config_sampling_fields(text_ckpt, tmp_path):
    path = tmp_path / "g"
    shutil.copytree(text_ckpt, path)
    (path / "generation_config.json").write_text(json.dumps(
        {"eos_token_id": 7, "do_sample": True, "temperature": 0.6, "top_p": 0.95, "top_k": 20}))
    gen = load_anna(path).generation
    assert gen.eos_token_ids == [7]
    assert gen.sampling == {"temperature": 0.6, "top_p": 0.95, "top_k": 20}


def test_bfloat16_load_keeps_decay_params_float32(text_ckpt):
    loaded = load_anna(text_ckpt, dtype=torch.bfloat16)
    params = dict(loaded.model.named_parameters())
    assert params["model.embed_tokens.weight"].dtype == torch.bfloat16
    assert params[A_LOG].dtype == torch.float32 and params["model.layers.0.linear_attn.dt_bias"].dtype == torch.float32
    ids = list(range(3, 50))
    ref = hf_reference_logits(text_ckpt, ids)  # float32
    hf_bf16 = hf_reference_logits(text_ckpt, ids, hf_model(text_ckpt, torch.bfloat16))
    logits = prefill_logits(loaded.model, ids)
    assert logits.dtype == torch.float32
    # bf16 error against the float32 oracle: no worse than HF's own bf16 forward pass
    assert 0 < rel_err(logits, ref) <= 1.25 * rel_err(hf_bf16, ref)
