"""Asynchronous scheduling: the next decode step is launched before the one in flight is read back.

Exercised on the CPU through the fake graph-capable accelerator of ``test_cuda_graphs`` (its
"replay" runs the step on the same static buffers, so a row whose input token is pending really
reads it from the previous replay's sampled ids). Every scenario must give exactly the tokens,
finish reasons and streamed deltas of the synchronous engine.
"""

from __future__ import annotations

import pytest
import torch
from anna_core.engine.request import PENDING
from anna_core.engine.sampling_params import SamplingParams
from anna_core.testing.engine_run import run_to_completion
from anna_core.testing.fake_graphs import record_rows_launched_ahead

from tests.core._graph_engine import graph_engine
from tests.core._tiny_family import write_tiny_config


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return write_tiny_config(tmp_path_factory.mktemp("tinyq_async"))


def _engine(model_dir, *, async_scheduling: bool, max_seqs: int = 4, num_blocks: int | None = None,
            max_len: int = 64):
    return graph_engine(model_dir, async_scheduling=async_scheduling, max_seqs=max_seqs, num_blocks=num_blocks,
                        max_len=max_len)


def _run(engine, prompts, params):
    streamed: dict[str, list[int]] = {}

    def on_output(out):
        assert PENDING not in out.token_ids and PENDING not in out.delta_token_ids
        streamed.setdefault(out.request_id, []).extend(out.delta_token_ids)

    finals = run_to_completion(engine, prompts, params, on_output=on_output)
    for out in finals:
        assert streamed[out.request_id] == out.token_ids  # deltas add up to the final ids, none twice
    return [(o.token_ids, o.finish_reason, o.stop_reason) for o in finals]


def _prompts(n: int, seed: int = 0) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(2, 256, (int(k),), generator=gen).tolist() for k in torch.randint(3, 12, (n,), generator=gen)]


def test_greedy_and_seeded_sampling_match_the_synchronous_engine(tiny_dir):
    prompts = _prompts(3)
    params = [SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True) for n in (9, 4, 12)]
    sampled = [SamplingParams(max_tokens=8, temperature=0.9, top_k=30, top_p=0.9, seed=s, ignore_eos=True)
               for s in (1, 2, 3)]
    sync = _engine(tiny_dir, async_scheduling=False)
    ref, ref_sampled = _run(sync, prompts, params), _run(sync, prompts, sampled)
    eng = _engine(tiny_dir, async_scheduling=True)
    counts = record_rows_launched_ahead(eng.runner.graphs)
    assert _run(eng, prompts, params) == ref
    assert _run(eng, prompts, sampled) == ref_sampled
    assert sum(counts) > 10  # most decode rows took their token on the device
    assert [len(t) for t, _, _ in ref] == [9, 4, 12]
    assert not eng.has_unfinished() and eng._inflight is None


def test_stop_tokens_mid_batch_discard_the_extra_token(tiny_dir):
    prompts = _prompts(4, seed=1)
    free = [SamplingParams(max_tokens=14, temperature=0.0, ignore_eos=True)] * 4
    sync = _engine(tiny_dir, async_scheduling=False)
    runs = _run(sync, prompts, free)
    # stop each request on the token it generates at a different step
    stops = [SamplingParams(max_tokens=14, temperature=0.0, ignore_eos=True, stop_token_ids=[t[k]])
             for (t, _, _), k in zip(runs, (2, 5, 0, 9))]
    ref = _run(sync, prompts, stops)
    assert any(r[1] == "stop" for r in ref)
    eng = _engine(tiny_dir, async_scheduling=True)
    assert _run(eng, prompts, stops) == ref
    assert eng.kv.num_used_blocks == 0 and eng.kv.slots.num_used_slots == 0  # everything returned


def test_new_arrivals_and_preemption_match(tiny_dir):
    prompts = _prompts(6, seed=2)
    params = [SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True) for n in (20, 3, 15, 8, 18, 5)]
    # 6 requests, 4 sequences at once, a KV cache too small for all: admissions mid-decode and preemptions
    sync = _engine(tiny_dir, async_scheduling=False, num_blocks=14)
    ref = _run(sync, prompts, params)
    eng = _engine(tiny_dir, async_scheduling=True, num_blocks=14)
    assert _run(eng, prompts, params) == ref
    assert eng.scheduler.num_preemptions > 0


def test_max_model_len_ends_requests_without_overrun(tiny_dir):
    prompts = _prompts(2, seed=3)
    params = SamplingParams(max_tokens=None, temperature=0.0, ignore_eos=True)
    ref = _run(_engine(tiny_dir, async_scheduling=False, max_len=24), prompts, params)
    got = _run(_engine(tiny_dir, async_scheduling=True, max_len=24), prompts, params)
    assert got == ref and all(r[1] == "length" for r in got)
    assert [len(p) + len(r[0]) for p, r in zip(prompts, got)] == [24, 24]


def test_abort_while_a_step_is_in_flight(tiny_dir):
    eng = _engine(tiny_dir, async_scheduling=True)
    eng.add_request("a", [5, 6, 7], SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True))
    eng.add_request("b", [8, 9], SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True))
    for _ in range(4):
        eng.step()
    assert eng._inflight is not None  # a decode step is launched, not read back
    out = eng.abort_request("a")
    assert out.finished and out.finish_reason == "abort" and PENDING not in out.token_ids
    finals = {}
    while eng.has_unfinished():
        for o in eng.step():
            assert o.request_id != "a"
            if o.finished:
                finals[o.request_id] = o
    assert len(finals["b"].token_ids) == 6 and eng.kv.slots.num_used_slots == 0
