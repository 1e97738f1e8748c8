"""Qwen3.5 MoE loading: expert-weight layouts and their errors, refused options, released shapes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from anna_core.errors import ModelLoadError, UnsupportedModelError
from anna_core.testing.checkpoints import copy_with_tensors
from safetensors.torch import load_file

from tests.qwen35.conftest import load_anna

from .conftest import restack

RELEASED = Path(__file__).parents[1] / "qwen35" / "reference_configs" / "Qwen3.5-35B-A3B" / "config.json"
EXPERT = "model.layers.2.mlp.experts"


def test_transformers_saves_per_expert_keys_and_both_layouts_load_the_same(tiny_moe_factory, tmp_path):
    per_expert = tiny_moe_factory(num_experts=8, top_k=2)
    names = load_file(str(per_expert / "model.safetensors"))
    assert f"{EXPERT}.7.gate_proj.weight" in names and f"{EXPERT}.gate_up_proj" not in names
    fused = tmp_path / "fused"
    shutil.copytree(per_expert, fused)
    restack(fused, to_fused=True)
    assert load_file(str(fused / "model.safetensors"))[f"{EXPERT}.gate_up_proj"].shape == (8, 64, 64)
    a, b = (dict(load_anna(p).model.named_parameters()) for p in (per_expert, fused))
    assert a.keys() == b.keys() and f"{EXPERT}.gate_up_proj" in a and not any(".experts.0." in n for n in a)
    for name in a:
        assert torch.equal(a[name], b[name]), name
    # fused -> per expert again reproduces transformers' tensors
    back = tmp_path / "back"
    shutil.copytree(fused, back)
    restack(back, to_fused=False)
    again = load_file(str(back / "model.safetensors"))
    assert again.keys() == names.keys() and all(torch.equal(again[n], names[n]) for n in names)


def test_missing_expert_weight_is_named(tiny_moe_factory, tmp_path):
    bad = copy_with_tensors(tiny_moe_factory(num_experts=8, top_k=2), tmp_path / "m",
                lambda t: t.pop(f"{EXPERT}.5.up_proj.weight"))
    with pytest.raises(ModelLoadError, match=r"missing tensors.*model\.layers\.2\.mlp\.experts\.5\.up_proj\.weight"):
        load_anna(bad)


def test_missing_fused_expert_tensor_is_named(tiny_moe_factory, tmp_path):
    bad = copy_with_tensors(tiny_moe_factory(num_experts=8, top_k=2, fused=True), tmp_path / "f",
                lambda t: t.pop(f"{EXPERT}.down_proj"))
    with pytest.raises(ModelLoadError, match=r"missing tensors.*model\.layers\.2\.mlp\.experts\.down_proj"):
        load_anna(bad)


def test_expert_count_mismatch_is_named(tiny_moe_factory, tmp_path):
    def drop_expert(t):
        t[f"{EXPERT}.gate_up_proj"] = t[f"{EXPERT}.gate_up_proj"][:7].clone()

    bad = copy_with_tensors(tiny_moe_factory(num_experts=8, top_k=2, fused=True), tmp_path / "s", drop_expert)
    with pytest.raises(ModelLoadError, match=r"shape mismatches: .*experts\.gate_up_proj: checkpoint \[7, 64, 64\] "
                                             r"vs model \[8, 64, 64\]"):
        load_anna(bad)


def test_extra_expert_is_unexpected(tiny_moe_factory, tmp_path):
    def add(t):
        t[f"{EXPERT}.8.down_proj.weight"] = t[f"{EXPERT}.0.down_proj.weight"].clone()

    bad = copy_with_tensors(tiny_moe_factory(num_experts=8, top_k=2), tmp_path / "u", add)
    with pytest.raises(ModelLoadError, match=r"unexpected tensors.*experts\.8\.down_proj\.weight"):
        load_anna(bad)


def test_mixed_expert_layouts_are_an_error(tiny_moe_factory, tmp_path):
    def add_fused(t):
        t["model.layers.0.mlp.experts.down_proj"] = torch.zeros(8, 64, 32)

    bad = copy_with_tensors(tiny_moe_factory(num_experts=8, top_k=2), tmp_path / "x", add_fused)
    with pytest.raises(ModelLoadError, match="mixes per-expert .* and fused"):
        load_anna(bad)


def test_vision_tower_weights_are_ignored(tiny_moe_factory):
    path = tiny_moe_factory(layout="vl", num_experts=8, top_k=2, fused=True)
    assert any(n.startswith("model.visual.") for n in load_file(str(path / "model.safetensors")))
    params = dict(load_anna(path).model.named_parameters())
    assert not any("visual" in n for n in params) and "model.layers.0.mlp.gate.weight" in params


@pytest.mark.parametrize("option, match", [
    ({"mlp_only_layers": [1]}, "mlp_only_layers"),
    ({"decoder_sparse_step": 2}, "decoder_sparse_step 2"),
    ({"norm_topk_prob": False}, "norm_topk_prob=false"),
])
def test_moe_options_transformers_lacks_are_refused(tiny_moe_factory, tmp_path, option, match):
    path = tmp_path / "o"
    shutil.copytree(tiny_moe_factory(num_experts=8, top_k=2), path)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, **option}))
    with pytest.raises(UnsupportedModelError, match=match):
        load_anna(path)


def test_dense_type_with_experts_is_an_error():
    from anna_qwen35.config import Qwen35Config

    config = json.loads(RELEASED.read_text())
    config["model_type"] = config["text_config"]["model_type"] = "qwen3_5"
    with pytest.raises(ModelLoadError, match="num_experts but model_type 'qwen3_5'"):
        Qwen35Config.from_hf(config)


def test_released_35b_a3b_shape_on_meta_matches_hf_parameter_count():
    from anna_core.kernels.registry import KernelRegistry, bind_ops
    from anna_core.testing.oracle import hide_fla
    from anna_qwen35.config import Qwen35Config
    from anna_qwen35.loader import build_model

    hide_fla()
    from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

    config = json.loads(RELEASED.read_text())
    cfg = Qwen35Config.from_hf(config)
    assert (cfg.is_moe, cfg.num_experts, cfg.num_experts_per_tok, cfg.layout) == (True, 256, 8, "vl")
    model = build_model(cfg, bind_ops(KernelRegistry([]), "cpu", torch.bfloat16), torch.bfloat16)
    with torch.device("meta"):
        hf = Qwen3_5MoeForCausalLM(Qwen3_5MoeTextConfig(**config["text_config"]))
    count = sum(p.numel() for p in model.parameters())
    assert count == sum(p.numel() for p in hf.parameters())
    assert 34e9 < count < 36e9
    assert model.capabilities.padded_prefill is True and model.capabilities.state_checkpoints is True


def _router_margins(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """Per token, the gap between its K-th and K+1-th largest router logit."""
    top = logits.topk(top_k + 1, dim=-1).values
    return top[:, top_k - 1] - top[:, top_k]


def test_dummy_weights_route_decisively_and_spread(tiny_moe_factory):
    """Random weights give router logits of std ~DUMMY_ROUTER_LOGIT_STD (not 0.02 * sqrt(H)): top-k margins
    far above bf16 rounding, so 16-bit and float32 runs choose the same experts; choices still spread."""
    from anna_core.layers.moe import DUMMY_ROUTER_LOGIT_STD

    model = load_anna(tiny_moe_factory(num_experts=8, top_k=2), load_format="dummy").model
    block = next(m for m in model.modules() if type(m).__name__ == "SparseMoeBlock")
    rows = torch.randn(512, block.gate.in_features, generator=torch.Generator().manual_seed(0))  # unit-RMS rows
    logits = block.gate(rows)
    assert 0.8 * DUMMY_ROUTER_LOGIT_STD < float(logits.std()) < 1.25 * DUMMY_ROUTER_LOGIT_STD
    assert float(_router_margins(logits, 2).median()) > 0.3
    _, experts = block.route(rows)
    assert torch.bincount(experts.flatten(), minlength=8).min() > 512 * 2 / 8 / 3  # every expert gets its share
