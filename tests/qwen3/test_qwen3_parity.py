"""Tiny random Qwen3 checkpoints (transformers' ``Qwen3ForCausalLM``) against HF's float32 forward pass: logits
whole and chunked, 32 greedy tokens, batched equal to single."""

from __future__ import annotations

import json

import pytest
import torch
from anna_core.errors import ModelLoadError, UnsupportedModelError
from anna_core.testing.oracle import hf_greedy, hf_model, hf_reference_logits
from anna_core.testing.runner import prefill_logits, simple_greedy, simple_greedy_batch
from anna_qwen35.qwen3.tiny import build_tiny_checkpoint

from tests.qwen3.conftest import load_anna, rel_err

PROMPT = [5, 17, 99, 3, 250, 42, 7, 7, 130, 64, 11, 200, 31, 8, 77, 150, 2, 19, 23, 90, 301, 12, 45]
CASES = {
    "untied-gqa": {"tie": False},
    "tied-bias-mha": {"tie": True, "attention_bias": True, "num_kv_heads": 4},
    "linear-rope-mqa": {"tie": False, "num_kv_heads": 1,
                        "rope_parameters": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}},
}


@pytest.fixture(scope="module", params=sorted(CASES))
def checkpoint(request, tmp_path_factory):
    path = build_tiny_checkpoint(tmp_path_factory.mktemp(f"qwen3-{request.param}"), seed=7, **CASES[request.param])
    return path, hf_model(path), load_anna(path)


def test_logits_match_hf_whole_and_chunked(checkpoint):
    path, hf, loaded = checkpoint
    assert loaded.family == "qwen3"
    ref = hf_reference_logits(path, PROMPT, model=hf)
    whole = prefill_logits(loaded.model, PROMPT)
    assert whole.shape == ref.shape == (len(PROMPT), 322)
    assert rel_err(whole, ref) <= 1e-4
    for chunk in (1, 5, 16):
        assert rel_err(prefill_logits(loaded.model, PROMPT, chunk_size=chunk, block_size=4), ref) <= 1e-4


def test_32_greedy_tokens_match_hf(checkpoint):
    path, hf, loaded = checkpoint
    expected = hf_greedy(path, PROMPT, 32, model=hf)
    assert simple_greedy(loaded.model, PROMPT, 32) == expected
    assert simple_greedy(loaded.model, PROMPT, 32, chunk_size=6, block_size=8) == expected


PROMPTS = [PROMPT, PROMPT[3:11], [9, 8, 7, 6, 5, 4, 3, 200, 201, 202, 203, 204, 205, 206, 207, 208, 209, 210]]


@torch.inference_mode()
def test_batched_prefill_logits_equal_each_alone(checkpoint):
    from anna_core.testing.runner import allocate_caches, build_batch

    _, _, loaded = checkpoint
    model = loaded.model
    caches = allocate_caches(model.cache_spec, num_blocks=3 * 8, block_size=4, num_slots=3, device=torch.device("cpu"),
                             dtype=torch.float32)
    batch = build_batch([(p, 0) for p in PROMPTS], block_size=4, blocks_per_seq=8, device=torch.device("cpu"),
                        spec=model.cache_spec)
    together = model.compute_logits(model(batch, caches)).split([len(p) for p in PROMPTS])
    for prompt, rows in zip(PROMPTS, together, strict=True):
        alone = prefill_logits(model, prompt)
        assert (rows - alone).abs().max().item() <= 1e-5 * alone.abs().max().item()


def test_batched_greedy_equals_single(checkpoint):
    _, _, loaded = checkpoint
    alone = [simple_greedy(loaded.model, p, 16) for p in PROMPTS]
    assert simple_greedy_batch(loaded.model, PROMPTS, 16) == alone
    assert simple_greedy_batch(loaded.model, PROMPTS, 16, chunk_size=5, block_size=4) == alone


def test_the_family_is_chosen_from_the_config(tmp_path):
    from anna_core.model_dir import inspect_model_dir, select_family
    from anna_core.plugins import make_plugin_manager, model_families

    path = build_tiny_checkpoint(tmp_path / "llama-looking-name", tokenizer=False)
    families = model_families(make_plugin_manager())
    assert select_family(inspect_model_dir(path), families).name == "qwen3"
    config = json.loads((path / "config.json").read_text())
    config["model_type"] = "qwen3_unknown"  # the architecture alone still selects it
    (path / "config.json").write_text(json.dumps(config))
    assert select_family(inspect_model_dir(path), families).name == "qwen3"


def test_dummy_load_needs_only_the_config(tmp_path):
    build_tiny_checkpoint(tmp_path, tokenizer=False)
    for f in tmp_path.glob("*.safetensors"):
        f.unlink()
    loaded = load_anna(tmp_path, load_format="dummy")
    assert loaded.tokenizer is None
    logits = prefill_logits(loaded.model, [1, 2, 3])
    assert logits.shape == (3, 322) and torch.isfinite(logits).all()
    with pytest.raises(ModelLoadError, match="safetensors"):
        load_anna(tmp_path)


def test_a_missing_tensor_is_named(tmp_path):
    from safetensors.torch import load_file, save_file

    build_tiny_checkpoint(tmp_path, tokenizer=False)
    tensors = load_file(str(tmp_path / "model.safetensors"))
    del tensors["model.layers.1.self_attn.k_norm.weight"]
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ModelLoadError, match=r"model\.layers\.1\.self_attn\.k_norm\.weight"):
        load_anna(tmp_path)


@pytest.mark.parametrize("change, message", [
    ({"use_sliding_window": True, "sliding_window": 8}, "sliding-window"),
    ({"layer_types": ["full_attention", "sliding_attention"]}, "sliding-window"),
    ({"hidden_act": "gelu"}, "hidden_act 'gelu'"),
])
def test_unsupported_configs_are_refused_by_name(tmp_path, change, message):
    build_tiny_checkpoint(tmp_path, tokenizer=False)
    config = json.loads((tmp_path / "config.json").read_text())
    config.update(change)
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedModelError, match=message):
        load_anna(tmp_path)


def test_the_family_offers_a_tiny_checkpoint(tiny_checkpoint, anna_plugin_manager):
    """``tiny_checkpoint("qwen3", ...)`` writes a folder the family loads, with its tokenizer, whose logits are
    HF's."""
    from anna_core.testing.tiny import load_against_hf

    loaded, error = load_against_hf(tiny_checkpoint("qwen3", tie=True, seed=2), pm=anna_plugin_manager)
    assert loaded.family == "qwen3" and loaded.tokenizer is not None
    assert loaded.generation.eos_token_ids == [2, 0]
    assert error <= 1e-4
