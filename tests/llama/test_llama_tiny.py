"""Tiny random Llama checkpoints (safetensors and GGUF) against HF transformers' float32 forward."""

import pytest
import torch
from anna_core.errors import ModelLoadError
from anna_core.testing.checkpoints import build_tiny_tokenizer
from anna_core.testing.oracle import hf_greedy, hf_reference_logits
from anna_core.testing.runner import prefill_logits, simple_greedy
from anna_llama.tiny import build_tiny_llama

from tests.core._gguf_fakes import write_gguf
from tests.llama.conftest import hf_to_gguf_tensors, load_anna, rel_err

PROMPT = [5, 17, 99, 3, 250, 42, 7, 7, 130, 64, 11, 200, 31, 8, 77, 150, 2, 19, 23, 90]
LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 16}

TINY = {"layers": 2}  # GGUF metadata of build_tiny_llama's shapes (other defaults already match)

CASES = {
    "tied": {"tie": True},
    "untied-llama3-rope-bias": {"tie": False, "rope_parameters": LLAMA3_ROPE, "attention_bias": True},
    "linear-rope": {"tie": True, "rope_parameters": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}},
}


@pytest.fixture(scope="module", params=sorted(CASES))
def safetensors_ckpt(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(f"llama-{request.param}")
    hf = build_tiny_llama(path, vocab_size=322, **CASES[request.param])
    build_tiny_tokenizer(path)
    return path, hf


def test_safetensors_logits_and_greedy_match_hf(safetensors_ckpt):
    path, hf = safetensors_ckpt
    loaded = load_anna(path)
    assert loaded.family == "llama" and loaded.tokenizer is not None
    assert loaded.generation.eos_token_ids == [2]
    ref = hf_reference_logits(path, PROMPT, model=hf)
    assert rel_err(prefill_logits(loaded.model, PROMPT), ref) <= 1e-4
    assert rel_err(prefill_logits(loaded.model, PROMPT, chunk_size=7), ref) <= 1e-4
    assert simple_greedy(loaded.model, PROMPT, 32) == hf_greedy(path, PROMPT, 32, model=hf)


def test_dummy_load_needs_only_config(tmp_path):
    build_tiny_llama(tmp_path, vocab_size=64, tie=False)
    for f in tmp_path.glob("*.safetensors"):
        f.unlink()
    loaded = load_anna(tmp_path, load_format="dummy")
    assert loaded.tokenizer is None
    assert prefill_logits(loaded.model, [1, 2, 3]).shape == (3, 64)
    with pytest.raises(ModelLoadError, match="safetensors"):
        load_anna(tmp_path)


@pytest.mark.parametrize("tie", [True, False])
def test_split_gguf_in_llama_cpp_layout_matches_hf(tmp_path, tie):
    # vocab 262 = the tiny GGUF tokenizer's size; q/k rows permuted as llama.cpp's converter writes them.
    hf = build_tiny_llama(tmp_path / "hf", vocab_size=262, tie=tie, attention_bias=not tie, seed=3)
    tensors = hf_to_gguf_tensors(hf)
    gguf_dir = tmp_path / "gguf"
    gguf_dir.mkdir()
    write_gguf(gguf_dir / "tiny.gguf", tensors=tensors, tokenizer=True, llama=TINY, split_max_tensors=9)
    assert len(list(gguf_dir.glob("tiny-0000*-of-0000*.gguf"))) >= 2
    loaded = load_anna(gguf_dir)
    assert loaded.family == "llama" and loaded.generation.eos_token_ids == [2]
    assert (loaded.model.lm_head is None) == tie
    ref = hf_reference_logits(tmp_path / "hf", PROMPT, model=hf)
    assert rel_err(prefill_logits(loaded.model, PROMPT), ref) <= 1e-4
    assert simple_greedy(loaded.model, PROMPT, 16) == hf_greedy(tmp_path / "hf", PROMPT, 16, model=hf)


def test_gguf_with_missing_tensor_names_it(tmp_path):
    hf = build_tiny_llama(tmp_path / "hf", vocab_size=262, tie=True)
    tensors = hf_to_gguf_tensors(hf)
    del tensors["blk.1.ffn_up.weight"]
    write_gguf(tmp_path / "m.gguf", tensors=tensors, tokenizer=True, llama=TINY)
    with pytest.raises(ModelLoadError, match=r"missing tensors.*model\.layers\.1\.mlp\.up_proj\.weight"):
        load_anna(tmp_path / "m.gguf")


def test_truncated_gguf_fails_at_load(tmp_path):
    hf = build_tiny_llama(tmp_path / "hf", vocab_size=262, tie=True)
    full = write_gguf(tmp_path / "full.gguf", tensors=hf_to_gguf_tensors(hf), tokenizer=True, llama=TINY)
    cut = tmp_path / "cut" / "m.gguf"
    cut.parent.mkdir()
    cut.write_bytes(full.read_bytes()[:-4096])
    with pytest.raises(ModelLoadError, match="truncated"):
        load_anna(cut.parent)


def test_unsupported_gguf_architecture_is_rejected_before_loading(tmp_path):
    from anna_core.errors import UnsupportedModelError

    write_gguf(tmp_path / "m.gguf", arch="rwkv6", tensors={"w": torch.ones(4, 32).numpy()})
    with pytest.raises(UnsupportedModelError, match=r"'rwkv6'.*'llama'"):
        load_anna(tmp_path)


def test_the_family_offers_a_tiny_checkpoint(tiny_checkpoint, anna_plugin_manager):
    """``tiny_checkpoint("llama", ...)`` (the family's declared builder) writes a folder the family loads, with
    its tokenizer, whose logits are HF's."""
    from anna_core.testing.tiny import load_against_hf

    loaded, error = load_against_hf(tiny_checkpoint("llama", attention_bias=True, seed=2), pm=anna_plugin_manager)
    assert loaded.family == "llama" and loaded.tokenizer is not None
    assert error <= 1e-4
