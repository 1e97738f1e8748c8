"""Captured prefills (:mod:`anna_core.engine.prefill_graphs`) on the CPU through the fake graph-capable
accelerator (:mod:`anna_core.testing.fake_graphs`: capture fails on any host read of a device value; replay reruns
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
from anna_core.testing.fake_graphs import FakeGraphAccelerator

from tests.core._engine_fakes import FakeLM
from tests.core._graph_engine import fake_graph_engine, generate_tokens
from tests.core._tiny_family import write_tiny_config

SMALL = (8, 12, 16, 32)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return write_tiny_config(tmp_path_factory.mktemp("tinyp"), padded_prefill=True)  # a hybrid model: every cache kind


@pytest.fixture
def small_buckets(monkeypatch):
    monkeypatch.setattr(model_runner, "prefill_buckets", lambda n: [b for b in SMALL if b <= n])


def test_buckets_grow_by_at_most_half_and_stop_at_the_step_budget():
    assert prefill_buckets(2048) == list(BUCKET_LADDER) and prefill_buckets(100) == []
    assert prefill_buckets(600) == [128, 192, 256, 384, 512]
    assert all(b <= 1.5 * a for a, b in zip(BUCKET_LADDER, BUCKET_LADDER[1:]))


def test_graph_prefill_gives_the_eager_logits(tiny_dir, small_buckets):
    engine, accel = fake_graph_engine(tiny_dir, graphs=True)
    runner = engine.runner
    graphs = runner.prefill_graphs
    assert graphs is not None and graphs.buckets == list(SMALL) and accel.captures == 16 + len(SMALL)
    model, caches = runner.model, runner.caches
    bs = caches.block_size
    for n in (3, 9, 16, 30):
        ids = torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(n)).tolist()
        table = list(range(-(-n // bs)))
        zero_slots(caches, torch.tensor([0, 1]))
        with torch.inference_mode():
            got = graphs.run(ids, _attention_tables(model, table), 0).clone()
            conv0 = [c[0].clone() for c in caches.state_caches[0].conv]
            state0 = [s[0].clone() for s in caches.state_caches[0].recurrent]
            # the same prompt eagerly, on other blocks and another slot
            other = [b + len(table) for b in table]
            batch = runner.build_batch(_sched(model, ids, other, 1))
            ref = model.compute_logits(model(batch, caches)[batch.logits_indices])
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
        for c, c0 in zip(caches.state_caches[0].conv, conv0):
            torch.testing.assert_close(c0, c[1], rtol=1e-5, atol=1e-6)
        for s, s0 in zip(caches.state_caches[0].recurrent, state0):
            torch.testing.assert_close(s0, s[1], rtol=1e-5, atol=1e-6)
    with pytest.raises(AnnaError, match="no captured prefill graph"):
        graphs.run(list(range(33)), _attention_tables(model, list(range(9))), 0)
    with pytest.raises(AnnaError, match="no captured prefill graph"):
        graphs.run([], _attention_tables(model, []), 0)


def _tables(model, table):
    """``table`` for every attention group of ``model`` (its full-attention and sliding-window groups alike: a
    fresh prompt's), ``[]`` for its recurrent group."""
    from anna_core.model import RecurrentStateSpec

    return [[] if isinstance(g, RecurrentStateSpec) else list(table) for g in model.cache_spec.groups]


def _attention_tables(model, table):
    from anna_core.model import RecurrentStateSpec

    return [list(table) for g in model.cache_spec.groups if not isinstance(g, RecurrentStateSpec)]


def _sched(model, ids, table, slot):
    from anna_core.engine.request import Request
    from anna_core.engine.sched_output import ScheduledSeq, SchedulerOutput

    req = Request("r", list(ids), SamplingParams(max_tokens=1, temperature=0.0))
    return SchedulerOutput(seqs=[ScheduledSeq(request=req, start=0, token_ids=list(ids),
                                              block_tables=_tables(model, table), state_slot=slot, samples=True)])


def test_a_replay_starts_from_a_zeroed_slot_and_reads_no_stale_cache(tiny_dir, small_buckets):
    """The runner zeroes a reused slot before the replay, and padding rows attend only to K/V this step
    wrote: a slot and blocks full of garbage (inf in the prompt's last block) leave the eager results."""
    engine, _ = fake_graph_engine(tiny_dir, graphs=True)
    runner = engine.runner
    caches, model = runner.caches, runner.model
    bs = caches.block_size
    ids = torch.randint(0, 256, (9,), generator=torch.Generator().manual_seed(3)).tolist()
    table = [0, 1, 2]  # 9 tokens in blocks of 4: the last block holds 1 token and 3 stale slots
    with torch.inference_mode():
        for t in caches.state_caches[0].recurrent + caches.state_caches[0].conv:
            t[0] = torch.randn(t[0].shape)  # a dirty, reused slot
        for _, v in caches.kv_pairs():
            v[2, 1:] = float("inf")  # leftovers of a request that overflowed
        got = runner.execute(_sched(model, ids, table, 0))
        assert runner.num_prefill_graph_steps == 1
        zero_slots(caches, torch.tensor([1]))
        batch = runner.build_batch(_sched(model, ids, [3, 4, 5], 1))
        ref = model.compute_logits(model(batch, caches)[batch.logits_indices])
    assert got.sampled == {"r": int(ref.argmax(-1))}
    for t in caches.state_caches[0].recurrent + caches.state_caches[0].conv:
        assert torch.isfinite(t[0]).all()
        torch.testing.assert_close(t[0], t[1], rtol=1e-5, atol=1e-6)
    assert all(torch.isfinite(k.view(-1, *k.shape[2:])[:9]).all() for k, _ in caches.kv_pairs())
    assert bs == 4


def test_engine_with_prefill_graphs_generates_the_eager_tokens(tiny_dir, small_buckets):
    gen = torch.Generator().manual_seed(0)
    lengths = (5, 9, 16, 20, 40, 7, 30, 11)  # more prompts than the engine's 5 slots: slots are reused
    prompts = [torch.randint(0, 256, (n,), generator=gen).tolist() for n in lengths]
    params = [SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True) for _ in prompts]
    sampled = [SamplingParams(max_tokens=6, temperature=1.0, seed=s, ignore_eos=True) for s in range(len(prompts))]
    eager, _ = fake_graph_engine(tiny_dir, graphs=False)
    graph, _ = fake_graph_engine(tiny_dir, graphs=True)
    # one request at a time: each prompt is a step of its own (40 tokens exceed the largest bucket)
    for p_list in (params, sampled):
        ref = [generate_tokens(eager, [p], [q]) for p, q in zip(prompts, p_list)]
        assert [generate_tokens(graph, [p], [q]) for p, q in zip(prompts, p_list)] == ref
    assert graph.runner.num_prefill_graph_steps == 14
    before = graph.runner.num_prefill_graph_steps
    # two prompts in one step: a split step replaying both graphs (tests/core/test_split_steps.py)
    assert generate_tokens(graph, prompts[:2], params[:2]) == generate_tokens(eager, prompts[:2], params[:2])
    assert graph.runner.num_prefill_graph_steps == before + 2 and graph.runner.num_split_steps == 1


def test_models_without_padded_prefill_are_not_captured(tiny_dir, small_buckets):
    engine, _ = fake_graph_engine(tiny_dir, graphs=True)
    model = engine.runner.model
    with pytest.raises(AnnaError, match="padded_prefill"):
        PrefillGraphs(FakeLM(), engine.runner.caches, FakeGraphAccelerator(), buckets=[8], max_blocks_per_seq=4)
    with pytest.raises(AnnaError, match="no prefill length"):
        PrefillGraphs(model, engine.runner.caches, FakeGraphAccelerator(), buckets=[], max_blocks_per_seq=4)


def test_warmup_prefills_two_prompts_on_the_scratch_block_and_leaves_the_slots_zeroed(tiny_dir, monkeypatch):
    from anna_core.engine.cache_allocator import scratch_block, scratch_slot
    from anna_core.engine.warmup import forward_on_scratch

    engine, _ = fake_graph_engine(tiny_dir, graphs=False)
    runner, caches = engine.runner, engine.runner.caches
    blk, slot = scratch_block(caches, 0), scratch_slot(caches)
    seen = []
    forward = runner.model.forward
    monkeypatch.setattr(runner.model, "forward", lambda batch, c: seen.append(batch) or forward(batch, c))
    kv_before = [t.clone() for kv in caches.kv_pairs() for t in kv]
    with torch.inference_mode():
        forward_on_scratch(runner.model, caches, [(0, 9), (0, 6)], torch.tensor([slot, 0]),
                           zero_states=True)  # the warm-up's two prompts
    (batch,) = seen
    assert batch.query_lens == [9, 6] and batch.cu_seqlens.tolist() == [0, 9, 15]
    assert batch.state_slots.tolist() == [slot, 0] and set(batch.tables[0].block_tables.flatten().tolist()) == {blk}
    for b, a in zip(kv_before, [t for kv in caches.kv_pairs() for t in kv]):
        assert torch.equal(a[:blk], b[:blk])  # K/V written in the scratch block only
        assert not torch.equal(a[blk], b[blk])
    for t in caches.state_caches[0].conv + caches.state_caches[0].recurrent:
        assert not t[[0, slot]].any()  # both slots zeroed again


def test_the_prefill_graphs_switch_leaves_prefills_eager_and_decode_graphs_captured(tiny_dir, small_buckets):
    from anna_core.engine.model_runner import RunnerConfig

    engine, accel = fake_graph_engine(tiny_dir, graphs=False)
    runner = engine.runner
    runner.setup(RunnerConfig(cuda_graph=True, prefill_graphs=False), max_model_len=engine.max_model_len,
                 max_num_seqs=5)
    report = runner.graph_report()
    assert report["decode"]["captured"] and not report["prefill"]["captured"]
    assert report["prefill"]["model_supports"] and "prefill_graphs=False" in report["prefill"]["why_not"]
    prompt = torch.randint(0, 256, (9,), generator=torch.Generator().manual_seed(5)).tolist()
    generate_tokens(engine, [prompt], [SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)])
    assert runner.num_prefill_graph_steps == 0 and runner.num_eager_steps == 1 and runner.num_graph_steps > 0
