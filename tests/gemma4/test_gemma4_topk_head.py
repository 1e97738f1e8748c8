"""The fused top-k LM head on a tiny Gemma 4 (soft-capped logits; CPU: the ``lm_head_topk`` reference): the
engine with it gives the full-logit path's greedy tokens over 32 tokens, batched and single, in float32 and in
bfloat16 (whose rounded logits tie: the lower id wins on both paths), and seeded top-k sampling's tokens."""

from __future__ import annotations

import pytest
import torch
from anna_core import SamplingParams
from anna_core.engine.config import EngineConfig
from anna_core.engine.llm_engine import LLMEngine
from anna_core.engine.model_runner import RunnerConfig
from anna_core.testing.engine_run import run_to_completion

from tests.gemma4.conftest import load_anna

N = 32
GREEDY = SamplingParams(temperature=0.0, max_tokens=N, ignore_eos=True)
PROMPTS = [[5, 6, 7], [100] * 5, [42], list(range(3, 40))]


@pytest.fixture(scope="module", params=[torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def loaded(request, gemma4_factory):
    return load_anna(gemma4_factory(variant="e2b"), dtype=request.param)


def _run(loaded, mode, prompts, params):
    eng = LLMEngine.from_loaded(loaded, EngineConfig(block_size=8, num_blocks=96, max_num_seqs=8,
                                                     max_prefill_tokens=128, max_model_len=128))
    eng.runner.setup(RunnerConfig(cuda_graph=False, warmup=False, fused_topk_head=mode), max_model_len=128,
                     max_num_seqs=8)
    outs = run_to_completion(eng, prompts, params)
    assert all(o.finish_reason == "length" for o in outs), [o.error for o in outs]
    return [o.token_ids for o in outs], eng.runner.head_report()


@pytest.mark.parametrize("prompts", [PROMPTS, PROMPTS[1:2]], ids=["batched", "single"])
def test_greedy_tokens_equal_the_full_heads(loaded, prompts):
    assert loaded.model.config.final_logit_softcapping is not None
    fused, report = _run(loaded, "on", prompts, GREEDY)
    full, _ = _run(loaded, "off", prompts, GREEDY)
    assert fused == full
    assert report["topk_steps"] == N - 1 and report["full_steps"] == 1  # the prompts' step keeps their logits


def test_seeded_top_k_sampling_equals_the_full_heads(loaded):
    params = [SamplingParams(temperature=1.0, top_k=64, seed=s, max_tokens=N, ignore_eos=True) for s in range(4)]
    fused, report = _run(loaded, "on", PROMPTS, params)
    full, _ = _run(loaded, "off", PROMPTS, params)
    assert fused == full and report["topk_steps"] == N - 1
