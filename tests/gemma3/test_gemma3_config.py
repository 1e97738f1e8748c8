"""Gemma 3 config parsing against transformers' own ``Gemma3TextConfig`` / ``Gemma3Config`` (both the 4.x
fields the released checkpoints carry and 5.x's), GGUF metadata, refusals and checkpoint names."""

from __future__ import annotations

import pytest
import torch
from anna_core.errors import ModelLoadError
from anna_gemma4.config import FULL, SLIDING
from anna_gemma4.gemma3.config import Gemma3Config
from anna_gemma4.gemma3.weights import gguf_name_map, gguf_transform, is_gguf_norm, name_map

# The shapes of the released config.json files (transformers 4.5x fields), abridged to what matters.
RELEASED_270M = dict(
    architectures=["Gemma3ForCausalLM"], model_type="gemma3_text", vocab_size=262144, hidden_size=640,
    intermediate_size=2048, num_hidden_layers=18, num_attention_heads=4, num_key_value_heads=1, head_dim=256,
    query_pre_attn_scalar=256, sliding_window=512, rope_theta=1_000_000.0, rope_local_base_freq=10_000.0,
    rope_scaling=None, max_position_embeddings=32768, _sliding_window_pattern=6, final_logit_softcapping=None,
    attn_logit_softcapping=None, use_bidirectional_attention=False, eos_token_id=1, pad_token_id=0,
    layer_types=["sliding_attention"] * 5 + ["full_attention"] + ["sliding_attention"] * 5 + ["full_attention"]
    + ["sliding_attention"] * 5 + ["full_attention"])
RELEASED_4B = dict(  # Gemma3ForConditionalGeneration: most text fields left to the defaults
    architectures=["Gemma3ForConditionalGeneration"], model_type="gemma3", eos_token_id=[1, 106],
    boi_token_index=255999, eoi_token_index=256000, image_token_index=262144, mm_tokens_per_image=256,
    text_config=dict(hidden_size=2560, intermediate_size=10240, model_type="gemma3_text", num_hidden_layers=34,
                     rope_scaling={"factor": 8.0, "rope_type": "linear"}, sliding_window=1024),
    vision_config=dict(model_type="siglip_vision_model", hidden_size=1152, intermediate_size=4304,
                       num_hidden_layers=27, num_attention_heads=16, image_size=896, patch_size=14,
                       vision_use_head=False))
RELEASED_27B_TEXT = dict(model_type="gemma3_text", hidden_size=5376, intermediate_size=21504, num_hidden_layers=62,
                         num_attention_heads=32, num_key_value_heads=16, head_dim=128, query_pre_attn_scalar=168,
                         sliding_window=1024, sliding_window_pattern=6,
                         rope_scaling={"factor": 8.0, "rope_type": "linear"})


def hf_text_config(config: dict):
    import transformers

    if "text_config" in config:
        return transformers.Gemma3Config(**config).text_config
    return transformers.Gemma3TextConfig(**config)


@pytest.mark.parametrize("config", [RELEASED_270M, RELEASED_4B, RELEASED_27B_TEXT], ids=["270m", "4b", "27b"])
def test_parses_as_transformers_does(config):
    cfg = Gemma3Config.from_hf(config)
    hf = hf_text_config(config)
    assert [spec.kind for spec in cfg.layers] == list(hf.layer_types)
    for kind in (SLIDING, FULL):
        want = {k: v for k, v in hf.rope_parameters[kind].items() if v is not None}
        assert cfg.rope[kind] == want, kind
    for field in ("vocab_size", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                  "head_dim", "sliding_window", "query_pre_attn_scalar", "max_position_embeddings", "rms_norm_eps"):
        assert getattr(cfg, field) == getattr(hf, field), field
    assert cfg.final_logit_softcapping == hf.final_logit_softcapping
    assert cfg.layout == ("conditional" if "text_config" in config else "causal")


def test_released_4b_values():
    cfg = Gemma3Config.from_hf(RELEASED_4B)
    assert cfg.rope[FULL] == {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0}
    assert cfg.rope[SLIDING] == {"rope_type": "default", "rope_theta": 10_000.0}
    assert cfg.layers_of(FULL) == [5, 11, 17, 23, 29]
    assert cfg.eos_token_id == (1, 106) and cfg.tie_word_embeddings and cfg.vocab_size == 262_208


@pytest.mark.parametrize("change, match", [
    ({"use_bidirectional_attention": True}, "bidirectional"),
    ({"attn_logit_softcapping": 50.0}, "attn_logit_softcapping"),
    ({"hidden_activation": "gelu"}, "hidden_activation"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 2.0}}, "yarn"),
    ({"rope_scaling": {"rope_type": "linear"}}, "factor"),
    ({"layer_types": ["sliding_attention"] * 3}, "layer_types"),
    ({"num_key_value_heads": 3}, "multiple"),
    ({"sliding_window": 0}, "sliding_window"),
])
def test_unsupported_or_inconsistent_configs_are_load_errors(change, match):
    with pytest.raises(ModelLoadError, match=match):
        Gemma3Config.from_hf({**RELEASED_270M, **change})


class FakeGGUF:
    def __init__(self, **arch):
        self.arch = arch

    def arch_get(self, key, default=KeyError):
        if key in self.arch:
            return self.arch[key]
        if default is KeyError:
            raise KeyError(f"gemma3.{key}")
        return default

    def get(self, key, default=None):
        return {"tokenizer.ggml.eos_token_id": 1}.get(key, default)


GGUF_270M = {"embedding_length": 640, "block_count": 18, "feed_forward_length": 2048, "attention.head_count": 4,
             "attention.head_count_kv": 1, "attention.key_length": 256, "attention.value_length": 256,
             "attention.layer_norm_rms_epsilon": 1e-6, "rope.freq_base": 1e6, "attention.sliding_window": 512,
             "context_length": 32768}


def test_gguf_metadata_as_llama_cpp_and_transformers_read_it():
    cfg = Gemma3Config.from_gguf(FakeGGUF(**GGUF_270M), vocab_size=262144, tied=True)
    assert [s.kind for s in cfg.layers] == [s.kind for s in Gemma3Config.from_hf(RELEASED_270M).layers]
    assert cfg.rope == {SLIDING: {"rope_type": "default", "rope_theta": 10_000.0},  # not stored: 1e4
                        FULL: {"rope_type": "default", "rope_theta": 1_000_000.0}}
    assert (cfg.query_pre_attn_scalar, cfg.sliding_window, cfg.head_dim, cfg.eos_token_id) == (256, 512, 256, (1,))
    # an explicit pattern (a period, or per-layer flags), linear RoPE scaling of the global layers
    flags = [i % 3 != 2 for i in range(18)]
    cfg = Gemma3Config.from_gguf(FakeGGUF(**GGUF_270M, **{"attention.sliding_window_pattern": flags,
                                                            "rope.scaling.type": "linear", "rope.scaling.factor": 8.0}),
                                 vocab_size=262144, tied=False)
    assert cfg.layers_of(FULL) == [2, 5, 8, 11, 14, 17] and not cfg.tie_word_embeddings
    assert cfg.rope[FULL] == {"rope_type": "linear", "rope_theta": 1e6, "factor": 8.0}
    assert cfg.rope[SLIDING]["rope_type"] == "default"
    # the 27B's query_pre_attn_scalar is hidden / heads (llama.cpp's rule)
    big = {**GGUF_270M, "block_count": 62, "embedding_length": 5376, "attention.head_count": 32,
           "attention.key_length": 128, "attention.value_length": 128, "attention.head_count_kv": 16}
    assert Gemma3Config.from_gguf(FakeGGUF(**big), vocab_size=8, tied=True).query_pre_attn_scalar == 168
    with pytest.raises(ModelLoadError, match="sliding_window"):
        Gemma3Config.from_gguf(FakeGGUF(**{k: v for k, v in GGUF_270M.items() if k != "attention.sliding_window"}),
                               vocab_size=8, tied=True)


def test_checkpoint_names_of_both_conditional_namings():
    cond = name_map(Gemma3Config.from_hf(RELEASED_4B))
    for name in ("model.language_model.layers.3.self_attn.q_norm.weight", "language_model.model.layers.3.self_attn.q_norm.weight"):
        assert cond(name) == "model.layers.3.self_attn.q_norm.weight"
    assert cond("language_model.model.embed_tokens.weight") == "model.embed_tokens.weight"
    for ignored in ("vision_tower.vision_model.encoder.layers.0.mlp.fc1.weight", "multi_modal_projector.mm_soft_emb_norm.weight",
                    "model.vision_tower.vision_model.head.weight", "model.multi_modal_projector.mm_input_projection_weight",
                    "lm_head.weight", "language_model.lm_head.weight"):  # tied: the head is the embeddings
        assert cond(ignored) is None, ignored
    untied = name_map(Gemma3Config.from_hf({**RELEASED_4B, "tie_word_embeddings": False}))
    assert untied("language_model.lm_head.weight") == untied("lm_head.weight") == "lm_head.weight"
    causal = name_map(Gemma3Config.from_hf(RELEASED_270M))
    assert causal("model.norm.weight") == "model.norm.weight"
    assert causal("vision_tower.x") == "vision_tower.x"  # not skipped: reported as unexpected


def test_gguf_names_and_norm_offset():
    assert gguf_name_map("blk.4.ffn_norm.weight") == "model.layers.4.pre_feedforward_layernorm.weight"
    assert gguf_name_map("blk.4.post_ffw_norm.weight") == "model.layers.4.post_feedforward_layernorm.weight"
    assert gguf_name_map("blk.4.post_attention_norm.weight") == "model.layers.4.post_attention_layernorm.weight"
    assert gguf_name_map("blk.0.attn_k_norm.weight") == "model.layers.0.self_attn.k_norm.weight"
    assert gguf_name_map("rope_freqs.weight") == "rope_freqs.weight"  # unexpected: reported by the loader
    norms = ["output_norm.weight", "blk.1.attn_norm.weight", "blk.1.attn_q_norm.weight", "blk.1.ffn_norm.weight",
             "blk.1.post_attention_norm.weight", "blk.1.post_ffw_norm.weight"]
    assert all(is_gguf_norm(n) for n in norms)
    assert not any(is_gguf_norm(n) for n in ("token_embd.weight", "blk.1.attn_q.weight", "blk.1.ffn_up.weight"))
    w = torch.tensor([1.5, 0.25])
    assert torch.equal(gguf_transform("blk.1.ffn_norm.weight", w), torch.tensor([0.5, -0.75]))
    assert torch.equal(gguf_transform("blk.1.ffn_up.weight", w), w)
