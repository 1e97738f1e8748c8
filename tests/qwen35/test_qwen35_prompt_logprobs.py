"""Prompt logprobs (``SamplingParams.prompt_logprobs``; :mod:`anna_core.engine.prompt_logprobs`) on a tiny Qwen3.5
against HF transformers' ``log_softmax`` of its prefill logits: every prompt token after the first, its rank and
its top alternatives, whole and in prefill chunks, alone and batched with other requests, with prefix caching on
and the prefix already cached (a request that asks computes its whole prompt), and after a preemption."""

from __future__ import annotations

import pytest
import torch
from anna_core import SamplingParams
from anna_core.engine.config import EngineConfig
from anna_core.engine.llm_engine import LLMEngine
from anna_core.testing.engine_run import run_to_completion
from anna_core.testing.oracle import hf_reference_logits

from tests.qwen35.conftest import load_anna

TOL = 2e-4


@pytest.fixture(scope="module")
def tiny(anna_tiny_qwen35_factory):
    return anna_tiny_qwen35_factory(layout="text", tie=True)


@pytest.fixture(scope="module")
def loaded(tiny):
    return load_anna(tiny)


@pytest.fixture(scope="module")
def reference(tiny, long_prompt):
    """HF's log-probabilities of the 90-token prompt's tokens 1..89, ``[89, vocab]``."""
    logits = hf_reference_logits(tiny, long_prompt[:90])
    return torch.log_softmax(logits[:-1], dim=-1)


def _engine(loaded, **config):
    options = dict(block_size=16, num_blocks=96, max_num_seqs=4, max_prefill_tokens=128, max_model_len=256)
    return LLMEngine.from_loaded(loaded, EngineConfig(**{**options, **config}))


def _check(entries, prompt, reference, k):
    assert entries[0] is None and len(entries) == len(prompt)
    for pos, e in enumerate(entries[1:], start=1):
        row = reference[pos - 1]
        assert e.token_id == prompt[pos]
        assert abs(e.logprob - row[prompt[pos]].item()) <= TOL
        assert e.rank == int((row > row[prompt[pos]] + 1e-5).sum()) + 1 or abs(
            row.sort(descending=True).values[e.rank - 1] - row[prompt[pos]]) <= 1e-4
        top = row.topk(k)
        assert [t for t, _ in e.top] == top.indices.tolist()
        assert all(abs(lp - v) <= TOL for (_, lp), v in zip(e.top, top.values.tolist()))


@pytest.mark.parametrize("chunk", [None, 17])
def test_prompt_logprobs_equal_hfs_whole_and_chunked_alone_and_batched(loaded, long_prompt, reference, chunk):
    prompt = long_prompt[:90]
    eng = _engine(loaded, **({"prefill_chunk_size": chunk} if chunk else {}))
    asks = SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True, prompt_logprobs=2)
    plain = SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True)
    outs = run_to_completion(eng, [prompt, long_prompt[5:40], prompt], [asks, plain, plain])
    _check(outs[0].prompt_logprobs, prompt, reference, 2)
    assert outs[1].prompt_logprobs is None and outs[2].prompt_logprobs is None
    assert outs[0].token_ids == outs[2].token_ids  # asking changes nothing generated


@pytest.mark.parametrize("prompt_cache_size", [0, 4], ids=["prefix-cache", "prompt-cache"])
def test_a_cached_prefix_is_computed_again_for_prompt_logprobs(loaded, long_prompt, reference, prompt_cache_size):
    """Two ways a prompt is found cached: the block prefix cache (with the recurrent state's snapshots) and the
    whole-prompt cache; neither serves a request that records prompt logprobs."""
    prompt = long_prompt[:90]
    eng = _engine(loaded, enable_prefix_caching=True, prompt_cache_size=prompt_cache_size, snapshot_interval=32)
    greedy = SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True)
    [first] = run_to_completion(eng, [prompt], [greedy])
    [again] = run_to_completion(eng, [prompt], [greedy])
    assert again.num_cached_tokens > 0  # the prefix is cached...
    asks = SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True, prompt_logprobs=0)
    [out] = run_to_completion(eng, [prompt], [asks])
    assert out.num_cached_tokens == 0  # ...but a request recording prompt logprobs computes all of it
    _check(out.prompt_logprobs, prompt, reference, 0)
    assert out.token_ids == first.token_ids


def test_prompt_logprobs_survive_a_preemption_without_duplicates(loaded, long_prompt, reference):
    prompt = long_prompt[:90]
    eng = _engine(loaded)
    eng.add_request("a", prompt, SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True, prompt_logprobs=1))
    while not eng._requests["a"].output_token_ids:
        eng.step()
    req = eng._requests["a"]
    eng.scheduler.preempt(req)  # recompute: the prompt's rows run again
    outs = {}
    while eng.has_unfinished():
        for o in eng.step():
            outs[o.request_id] = o
    _check(outs["a"].prompt_logprobs, prompt, reference, 1)


def test_with_graphs_the_prompt_runs_eagerly_and_the_rest_replays(loaded, long_prompt, reference):
    """On a graph-capable device (the fake one) a prompt that records logprobs never replays a prefill graph (it
    returns the last row only), a one-token prompt chunk never rides a decode graph, and its decode steps still
    replay decode graphs; a request that does not ask replays its prefill graph as before."""
    from anna_core.engine.model_runner import RunnerConfig
    from anna_core.testing.fake_graphs import FakeGraphAccelerator

    asks = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True, prompt_logprobs=1)
    for prompt, chunk in ((long_prompt[:90], None), (long_prompt[:24], 1)):  # 1: one-token chunks mid-prompt
        eng = _engine(loaded, **({"prefill_chunk_size": chunk} if chunk else {}))
        eng.runner.accel = FakeGraphAccelerator()
        eng.runner.setup(RunnerConfig(cuda_graph=True, warmup=False), max_model_len=256, max_num_seqs=4)
        assert eng.runner.prefill_graphs is not None and eng.runner.graphs is not None
        plain = SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True)  # decodes beside the prompt chunks
        out, _ = run_to_completion(eng, [prompt, [5, 6, 7]], [asks, plain])
        _check(out.prompt_logprobs, prompt, reference[:len(prompt) - 1], 1)
        assert eng.runner.num_prefill_graph_steps == 0 and eng.runner.num_graph_steps >= 2
    short = long_prompt[:20]
    eng2 = _engine(loaded)
    eng2.runner.accel = FakeGraphAccelerator()
    eng2.runner.setup(RunnerConfig(cuda_graph=True, warmup=False), max_model_len=256, max_num_seqs=4)
    run_to_completion(eng2, [short], [SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True)])
    assert eng2.runner.num_prefill_graph_steps == 1
