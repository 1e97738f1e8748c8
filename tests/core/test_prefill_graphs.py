"""Captured prefills (:mod:`anna_core.engine.prefill_graphs`) on the CPU through the fake graph-capable
accelerator of ``test_cuda_graphs`` (capture fails on any host read of a device value; replay reruns
the step over the same static buffers): a fresh prompt replayed from its bucket's graph gives the
eager prefill's logits, the engine's tokens are the eager engine's, and everything else stays eager."""

from __future__ import annotations

import pytest
import torch
from anna_core.engine import model_runner
from anna_core.engine.cache_allocator import zero_slots
from anna_core.engine.prefill_graphs import BUCKET_LADDER, PrefillGraphs, prefill_buckets
from anna_core.engine.sampling_params import SamplingParams
from anna_core.errors import AnnaError

from tests.bench.tiny_config import write_tiny_qwen35_config
from tests.core.test_cuda_graphs import FakeGraphAccelerator, _engine, _generate

SMALL = (8, 12, 16, 32)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return write_tiny_qwen35_config(tmp_path_factory.mktemp("tinyp"))


@pytest.fixture
def small_buckets(monkeypatch):
    monkeypatch.setattr(model_runner, "prefill_buckets", lambda n: [b for b in SMALL if b <= n])


def test_buckets_grow_by_at_most_half_and_stop_at_the_step_budget():
    assert prefill_buckets(2048) == list(BUCKET_LADDER) and prefill_buckets(100) == []
    assert prefill_buckets(600) == [128, 192, 256, 384, 512]
    assert all(b <= 1.5 * a for a, b in zip(BUCKET_LADDER, BUCKET_LADDER[1:]))


def test_graph_prefill_gives_the_eager_logits(tiny_dir, small_buckets):
    engine, accel = _engine(tiny_dir, graphs=True)
    runner = engine.runner
    graphs = runner.prefill_graphs
    assert graphs is not None and graphs.buckets == list(SMALL) and accel.captures == 12 + len(SMALL)
    model, caches = runner.model, runner.caches
    bs = caches.block_size
    for n in (3, 9, 16, 30):
        ids = torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(n)).tolist()
        table = list(range(-(-n // bs)))
        zero_slots(caches, torch.tensor([0, 1]))
        with torch.inference_mode():
            got = graphs.run(ids, table, 0).clone()
            conv0 = [c[0].clone() for c in caches.conv_states]
            state0 = [s[0].clone() for s in caches.recurrent_states]
            # the same prompt eagerly, on other blocks and another slot
            other = [b + len(table) for b in table]
            batch = runner.build_batch(_sched(ids, other, 1))
            ref = model.compute_logits(model(batch, caches)[batch.logits_indices])
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
        for c, c0 in zip(caches.conv_states, conv0):
            torch.testing.assert_close(c0, c[1], rtol=1e-5, atol=1e-6)
        for s, s0 in zip(caches.recurrent_states, state0):
            torch.testing.assert_close(s0, s[1], rtol=1e-5, atol=1e-6)
    with pytest.raises(AnnaError, match="no captured prefill graph"):
        graphs.run(list(range(33)), list(range(9)), 0)
    with pytest.raises(AnnaError, match="no captured prefill graph"):
        graphs.run([], [], 0)


def _sched(ids, table, slot):
    from anna_core.engine.request import Request
    from anna_core.engine.sched_output import ScheduledSeq, SchedulerOutput

    req = Request("r", list(ids), SamplingParams(max_tokens=1))
    return SchedulerOutput(seqs=[ScheduledSeq(request=req, start=0, token_ids=list(ids), block_table=table,
                                              state_slot=slot, samples=True)])


def test_engine_with_prefill_graphs_generates_the_eager_tokens(tiny_dir, small_buckets):
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 256, (n,), generator=gen).tolist() for n in (5, 9, 16, 20, 40)]
    params = [SamplingParams(max_tokens=6, temperature=1.0, seed=s, ignore_eos=True) for s in range(len(prompts))]
    eager, _ = _engine(tiny_dir, graphs=False)
    graph, _ = _engine(tiny_dir, graphs=True)
    # one request at a time: each prompt is a step of its own (40 tokens exceed the largest bucket)
    ref = [_generate(eager, [p], [q]) for p, q in zip(prompts, params)]
    assert [_generate(graph, [p], [q]) for p, q in zip(prompts, params)] == ref
    assert graph.runner.num_prefill_graph_steps == 4
    before = graph.runner.num_prefill_graph_steps
    assert _generate(graph, prompts[:2], params[:2]) == _generate(eager, prompts[:2], params[:2])  # two prompts: eager
    assert graph.runner.num_prefill_graph_steps == before


def test_models_without_padded_prefill_are_not_captured(tiny_dir, small_buckets):
    engine, _ = _engine(tiny_dir, graphs=True)
    model = engine.runner.model
    with pytest.raises(AnnaError, match="padded_prefill"):
        PrefillGraphs(object(), engine.runner.caches, FakeGraphAccelerator(), buckets=[8], max_blocks_per_seq=4)
    with pytest.raises(AnnaError, match="no prefill length"):
        PrefillGraphs(model, engine.runner.caches, FakeGraphAccelerator(), buckets=[], max_blocks_per_seq=4)
