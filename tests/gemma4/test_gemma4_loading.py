"""Gemma 4 weight loading: the towers of the conditional layout are skipped, a missing, unexpected or
mis-shaped tensor is a load error naming it, tied and untied heads, dummy weights; the family spec."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from anna_core.errors import ModelLoadError
from anna_core.plugins import make_plugin_manager, model_families
from anna_core.testing.checkpoints import copy_with_tensors
from anna_core.testing.oracle import hf_model, hf_reference_logits
from anna_core.testing.runner import prefill_logits
from anna_core.weights.safetensors_loader import checkpoint_files
from safetensors.torch import load_file

from tests.gemma4.conftest import load_anna, rel_err


@pytest.fixture(scope="module")
def conditional(gemma4_factory) -> Path:
    return gemma4_factory(variant="e2b", layout="conditional")


def test_towers_are_skipped_and_the_language_model_loads(conditional):
    names = checkpoint_files(conditional)
    towers = [n for n in names if n.startswith(("model.vision_tower.", "model.audio_tower.", "model.embed_"))]
    assert towers and any(n.startswith("model.language_model.") for n in names)
    params = dict(load_anna(conditional).model.named_parameters())
    assert not any("tower" in n or "embed_vision" in n or "embed_audio" in n for n in params)
    stored = load_file(str(conditional / "model.safetensors"))
    for ckpt, mine in (("model.language_model.layers.3.layer_scalar", "model.layers.3.layer_scalar"),
                       ("model.language_model.embed_tokens_per_layer.weight", "model.embed_tokens_per_layer.weight")):
        assert torch.equal(params[mine], stored[ckpt])
    assert "lm_head.weight" not in params  # tied


def test_missing_tensor_is_named(conditional, tmp_path):
    name = "model.language_model.layers.2.self_attn.k_norm.weight"
    bad = copy_with_tensors(conditional, tmp_path / "m", lambda t: t.pop(name))
    with pytest.raises(ModelLoadError, match=r"missing tensors.*model\.layers\.2\.self_attn\.k_norm\.weight"):
        load_anna(bad)


def test_kv_projection_of_a_kv_shared_layer_is_unexpected(conditional, tmp_path):
    name = "model.language_model.layers.5.self_attn.k_proj.weight"  # layer 5 reads layer 2's K/V

    def add(t):
        t[name] = torch.zeros(32, 64)

    bad = copy_with_tensors(conditional, tmp_path / "u", add)
    with pytest.raises(ModelLoadError, match=r"unexpected tensors.*layers\.5\.self_attn\.k_proj\.weight"):
        load_anna(bad)


def test_shape_mismatch_is_named(conditional, tmp_path):
    name = "model.language_model.layers.4.mlp.up_proj.weight"  # double-wide: [192, 64]

    def shrink(t):
        t[name] = t[name][:96].clone()

    bad = copy_with_tensors(conditional, tmp_path / "s", shrink)
    with pytest.raises(ModelLoadError, match=r"shape mismatches: model\.language_model\.layers\.4\.mlp\.up_proj\.weight: "
                                             r"checkpoint \[96, 64\] vs model \[192, 64\]"):
        load_anna(bad)


@pytest.mark.parametrize("layout", ["causal", "conditional"])
def test_untied_head_loads_and_matches_hf(gemma4_factory, prompt, layout):
    path = gemma4_factory(variant="dense", layout=layout, tie=False)
    anna = load_anna(path)
    head = dict(anna.model.named_parameters())["lm_head.weight"]
    assert not torch.equal(head, anna.model.model.embed_tokens.weight)
    assert rel_err(prefill_logits(anna.model, prompt[:40], block_size=8), hf_reference_logits(path, prompt[:40])) <= 1e-4


def test_untied_checkpoint_without_lm_head_fails(gemma4_factory, tmp_path):
    src = gemma4_factory(variant="dense", layout="causal", tie=False)
    bad = copy_with_tensors(src, tmp_path / "h", lambda t: t.pop("lm_head.weight"))
    with pytest.raises(ModelLoadError, match=r"missing tensors.*lm_head\.weight"):
        load_anna(bad)


def test_dummy_weights_from_config_alone(gemma4_factory, tmp_path):
    src = gemma4_factory(variant="moe", layout="conditional")
    only = tmp_path / "cfg"
    only.mkdir()
    shutil.copy(src / "config.json", only / "config.json")
    anna = load_anna(only, load_format="dummy")
    assert anna.tokenizer is None
    params = dict(anna.model.named_parameters())
    assert torch.equal(params["model.layers.0.layer_scalar"], torch.ones(1))  # identity, not zero
    assert torch.equal(params["model.layers.0.router.per_expert_scale"], torch.ones(4))
    logits = prefill_logits(anna.model, list(range(3, 40)), block_size=8)
    assert torch.isfinite(logits).all() and logits.std() > 0


def test_bf16_load_is_as_close_to_fp32_as_transformers_bf16(gemma4_factory, prompt):
    """Random tiny models amplify bf16 rounding (transformers' own bf16 run is ~30% off its fp32 one);
    Anna's bf16 run must stay within that."""
    path = gemma4_factory(variant="e2b", layout="causal")
    bf16 = load_anna(path, dtype=torch.bfloat16)
    assert dict(bf16.model.named_parameters())["model.embed_tokens.weight"].dtype == torch.bfloat16
    ids = prompt[:40]
    fp32 = hf_reference_logits(path, ids)
    hf_bf16 = hf_reference_logits(path, ids, hf_model(path, torch.bfloat16))
    assert rel_err(prefill_logits(bf16.model, ids, block_size=8), fp32) <= 1.1 * rel_err(hf_bf16, fp32)


def test_family_spec_serves_both_layouts_with_gemma4_parsers(gemma4_factory):
    from anna_core.model_dir import inspect_model_dir, select_family

    fams = {f.name: f for f in model_families(make_plugin_manager())}
    spec = fams["gemma4"]
    assert set(spec.model_types) == {"gemma4", "gemma4_text"} and spec.distribution == "anna-gemma4"
    assert (spec.reasoning_parser, spec.tool_call_parser) == ("gemma4", "gemma4")
    assert spec.loader == "anna_gemma4.loader:load"
    for layout, model_type in (("causal", "gemma4_text"), ("conditional", "gemma4")):
        path = gemma4_factory(variant="dense", layout=layout)
        assert json.loads((path / "config.json").read_text())["model_type"] == model_type
        assert select_family(inspect_model_dir(path), list(fams.values())).name == "gemma4"


def test_dummy_router_is_decisive_and_spreads(gemma4_factory):
    """Random weights give the router logits of std ~DUMMY_ROUTER_LOGIT_STD (the router's input rows have RMS
    hidden ** -0.5, so its matrix is drawn with that std): top-k margins far above bf16 rounding."""
    from anna_core.layers.moe import DUMMY_ROUTER_LOGIT_STD

    model = load_anna(gemma4_factory(variant="moe"), load_format="dummy").model
    layer = next(m for m in model.modules() if getattr(m, "has_moe", False))
    router = layer.router
    h = torch.randn(512, router.proj.in_features, generator=torch.Generator().manual_seed(0))
    logits = router.proj(router.norm(h) * router.scale * router.root_scale)
    assert 0.8 * DUMMY_ROUTER_LOGIT_STD < float(logits.std()) < 1.25 * DUMMY_ROUTER_LOGIT_STD
    top = logits.topk(router.top_k + 1, dim=-1).values
    assert float((top[:, router.top_k - 1] - top[:, router.top_k]).median()) > 0.3
    _, experts = router(router.inputs(h, layer.pre_feedforward_layernorm_2)[1])
    counts = torch.bincount(experts.flatten(), minlength=router.proj.out_features)
    assert counts.min() > 512 * router.top_k / router.proj.out_features / 3


@pytest.mark.parametrize("variant", ["e2b", "dense"])
def test_the_family_offers_a_tiny_checkpoint(tiny_checkpoint, anna_plugin_manager, variant):
    """``tiny_checkpoint("gemma4", variant=...)`` (the family's declared builder) writes a folder the family
    loads, with its tokenizer, whose logits are HF's."""
    from anna_core.testing.tiny import load_against_hf

    loaded, error = load_against_hf(tiny_checkpoint("gemma4", variant=variant, seed=2), pm=anna_plugin_manager, block_size=8)
    assert loaded.family == "gemma4" and loaded.tokenizer is not None
    assert error <= 1e-4
