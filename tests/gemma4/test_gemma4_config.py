"""Gemma 4 configs: the released checkpoints' config.json (global_head_dim form) and what transformers
5.24 writes (per_layer_config form) give the same layers as transformers reads; the cache groups; the
model's parameter shapes at released sizes (meta device) equal transformers' language model's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from anna_core.cache_spec import FullAttentionSpec, SlidingWindowSpec
from anna_core.errors import ModelLoadError
from anna_core.kernels.registry import KernelRegistry, bind_ops
from anna_core.testing.oracle import hide_fla
from anna_gemma4.config import FULL, SLIDING, Gemma4Config
from anna_gemma4.loader import build_model
from anna_gemma4.model import cache_spec
from anna_gemma4.weights import name_map

REFERENCE = Path(__file__).parent / "reference_configs"
RELEASED = ("gemma-4-E2B-it", "gemma-4-E4B-it", "gemma-4-26B-A4B-it", "gemma-4-31B-it")


def released(name: str) -> dict:
    return json.loads((REFERENCE / name / "config.json").read_text())


def hf_text_config(text: dict):
    hide_fla()
    from transformers import Gemma4TextConfig

    return Gemma4TextConfig(**{k: v for k, v in text.items() if k not in ("model_type", "transformers_version")})


@pytest.mark.parametrize("name", RELEASED)
def test_released_config_layers_match_transformers_in_both_forms(name):
    raw = released(name)
    cfg = Gemma4Config.from_hf(raw)
    hf = hf_text_config(raw["text_config"])
    modes = hf.kv_sharing_modes
    assert cfg.layout == "conditional" and cfg.num_hidden_layers == hf.num_hidden_layers
    for i, layer in enumerate(cfg.layers):
        per_layer = hf.per_layer_config[i]
        assert (layer.kind, layer.head_dim, layer.num_kv_heads) == (
            hf.layer_types[i], per_layer.head_dim, per_layer.num_key_value_heads), i
        assert (layer.kv_owner is not None) == (modes[i] == "reuse")
        if layer.kv_owner is not None:  # reads the last unshared layer of its kind, which stores its K/V
            assert modes[layer.kv_owner] == "store" and hf.layer_types[layer.kv_owner] == layer.kind
        assert layer.k_eq_v == (hf.attention_k_eq_v and layer.kind == FULL)
    # the form transformers 5.24 saves: per_layer_config, no global_head_dim
    saved = hf.to_dict()
    assert "per_layer_config" in saved and "global_head_dim" not in saved
    assert Gemma4Config.from_hf({**raw, "text_config": saved}).layers == cfg.layers


def test_e2b_cache_groups():
    cfg = Gemma4Config.from_hf(released("gemma-4-E2B-it"))
    spec = cache_spec(cfg)
    sliding, full = spec.groups
    assert isinstance(sliding, SlidingWindowSpec) and type(full) is FullAttentionSpec
    assert (sliding.window, sliding.head_dim, sliding.num_kv_heads) == (512, 256, 1)
    assert (full.head_dim, full.num_kv_heads) == (512, 1)
    assert sliding.layers == (0, 1, 2, 3, 5, 6, 7, 8, 10, 11, 12, 13) and full.layers == (4, 9, 14)
    assert dict(sliding.shared) == {i: 13 for i in range(15, 35) if (i + 1) % 5}  # 20 layers share K/V
    assert dict(full.shared) == {19: 14, 24: 14, 29: 14, 34: 14}
    assert len(sliding.shared) + len(full.shared) == 20
    assert spec.groups[spec.group_of(34)].cache_index(34) == full.layers.index(14)
    assert [cfg.layers[i].intermediate_size for i in (14, 15)] == [6144, 12288]  # double-wide when shared
    assert cfg.eos_token_id == (1, 106) and cfg.pad_token_id == 0  # the outer config's end ids
    assert cfg.placeholder_token_ids == (258880, 258884, 258881)  # image, video, audio: embedded as pad
    assert (cfg.final_logit_softcapping, cfg.hidden_size_per_layer_input, cfg.tie_word_embeddings) == (30.0, 256, True)


def test_26b_and_31b_cache_groups():
    for name, sliding_kv, full_kv in (("gemma-4-26B-A4B-it", 8, 2), ("gemma-4-31B-it", 16, 4)):
        sliding, full = cache_spec(Gemma4Config.from_hf(released(name))).groups
        assert (sliding.window, sliding.head_dim, sliding.num_kv_heads) == (1024, 256, sliding_kv)
        assert (full.head_dim, full.num_kv_heads) == (512, full_kv)
        assert not sliding.shared and not full.shared


@pytest.mark.parametrize("name", RELEASED)
def test_parameter_shapes_at_released_sizes_match_transformers(name):
    """Anna's model and transformers' ``Gemma4ForConditionalGeneration`` built on the meta device: every
    checkpoint tensor of the language model maps to an Anna parameter of its shape, and nothing is left."""
    hide_fla()
    from transformers import Gemma4Config as HFConfig
    from transformers import Gemma4ForConditionalGeneration

    raw = released(name)
    cfg = Gemma4Config.from_hf(raw)
    ops = bind_ops(KernelRegistry.from_plugins(), "cpu", torch.bfloat16)
    mine = {n: tuple(p.shape) for n, p in build_model(cfg, ops, torch.bfloat16).named_parameters()}
    hf_cfg = HFConfig(**{k: v for k, v in raw.items() if k not in ("model_type", "transformers_version")})
    with torch.device("meta"):
        hf = Gemma4ForConditionalGeneration(hf_cfg)
    mapper = name_map(cfg)
    theirs = {}
    for n, t in hf.state_dict().items():
        target = mapper(n)
        if target is not None and not any(s in n for s in ("inv_freq", "embed_scale")):
            theirs[target] = tuple(t.shape)
    assert mine == theirs


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.update(use_bidirectional_attention="all"), "not a causal language model"),
    (lambda t: t.update(hidden_activation="silu"), "hidden_activation 'silu'"),
    (lambda t: t.update(per_layer_config={"4": {"head_dim": 512, "sliding_window": 8}}), r"overrides \['sliding_window'\]"),
    (lambda t: t["rope_parameters"][SLIDING].update(rope_type="yarn"), "rope_type 'yarn'"),
    (lambda t: t.update(num_kv_shared_layers=35), "num_kv_shared_layers 35"),
    (lambda t: t.pop("vocab_size"), "lacks the Gemma 4 field 'vocab_size'"),
])
def test_unsupported_or_broken_configs_are_load_errors(edit, message):
    raw = released("gemma-4-E2B-it")
    raw = json.loads(json.dumps(raw))
    edit(raw["text_config"])
    with pytest.raises(ModelLoadError, match=message):
        Gemma4Config.from_hf(raw)
