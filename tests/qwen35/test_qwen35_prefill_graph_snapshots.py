"""Qwen3.5's recurrent-state snapshots taken inside a prefill pass, eager and captured (tiny Qwen3.5, CPU, float32;
the fake graph accelerator of :mod:`anna_core.testing.fake_graphs` captures by running the step).

With prefix caching on, a hybrid model's prompt is no longer cut at every snapshot boundary: the pass
runs the recurrent rule in rounds and writes each boundary's state into the snapshot store. These tests
compare those snapshots with the ones the cut-at-every-boundary path takes, and check that prompts
resuming from them generate what a cold engine generates.
"""

from __future__ import annotations

import pytest
import torch
from anna_core.engine import model_runner
from anna_core.engine.cache_allocator import zero_slots
from anna_core.engine.config import EngineConfig
from anna_core.engine.llm_engine import LLMEngine
from anna_core.engine.model_runner import RunnerConfig
from anna_core.engine.prefix_cache import extend_hashes
from anna_core.engine.sampling_params import SamplingParams
from anna_core.errors import AnnaError
from anna_core.loading import load_model
from anna_core.model import ModelCapabilities
from anna_core.testing.fake_graphs import FakeGraphAccelerator

from tests.bench.tiny_config import write_tiny_qwen35_config
from tests.core._graph_engine import generate_tokens
from tests.core.test_prefill_graphs import SMALL, _sched

INTERVAL = 8
BS = 4
GREEDY = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return write_tiny_qwen35_config(tmp_path_factory.mktemp("tinys"))


@pytest.fixture
def small_buckets(monkeypatch):
    monkeypatch.setattr(model_runner, "prefill_buckets", lambda n: [b for b in SMALL if b <= n])


def _engine(model_dir, *, graphs: bool, in_pass: bool = True, caching: bool = True, max_seqs: int = 3):
    loaded = load_model(model_dir, device="cpu", dtype="fp32", load_format="dummy")
    if not in_pass:
        loaded.model.capabilities = ModelCapabilities(padded_prefill=True)  # an instance attribute: this model only
    cfg = EngineConfig(max_num_seqs=max_seqs, max_model_len=48, block_size=BS, num_blocks=96, max_prefill_tokens=64,
                       enable_prefix_caching=caching, snapshot_interval=INTERVAL, num_snapshots=12,
                       prompt_cache_size=0, async_scheduling=False)
    engine = LLMEngine.from_loaded(loaded, cfg)
    engine.runner.accel = FakeGraphAccelerator()
    engine.runner.setup(RunnerConfig(cuda_graph=graphs, compile_mode="none"), max_model_len=engine.max_model_len,
                        max_num_seqs=max_seqs)
    return engine


def _snapshots(engine, prompt):
    """Boundary position -> (conv states, recurrent states) per recurrent layer, from the snapshot store."""
    hashes = extend_hashes([], lambda a, b: prompt[a:b], len(prompt) // BS, BS)
    store, found = engine.snapshot_store, {}
    for pos in range(INTERVAL, len(prompt) + 1, INTERVAL):
        idx = engine.scheduler.snapshots.get(hashes[pos // BS - 1])
        if idx is not None:
            found[pos] = ([c[idx].clone() for c in store.conv], [r[idx].clone() for r in store.recurrent])
    return found


def _prompts(n, *lengths):
    gen = torch.Generator().manual_seed(n)
    return [torch.randint(3, 250, (length,), generator=gen).tolist() for length in lengths]


def _assert_same_snapshots(got, want):
    assert sorted(got) == sorted(want)
    for pos in want:
        for a, b in zip(got[pos][0] + got[pos][1], want[pos][0] + want[pos][1]):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_one_pass_takes_the_snapshots_of_a_prompt_cut_at_every_boundary(tiny_dir):
    [prompt] = _prompts(1, 30)  # boundaries 8, 16, 24 inside the prompt
    cut = _engine(tiny_dir, graphs=False, in_pass=False)
    one = _engine(tiny_dir, graphs=False)
    assert not cut.scheduler.checkpoints_in_pass and one.scheduler.checkpoints_in_pass
    want = generate_tokens(cut, [prompt], [GREEDY])
    assert generate_tokens(one, [prompt], [GREEDY]) == want
    # the cut engine computed the prompt in 4 chunks, the other in one pass
    assert cut.runner.num_eager_steps - one.runner.num_eager_steps == 3
    snaps = _snapshots(one, prompt)
    assert sorted(snaps) == [8, 16, 24] and one.scheduler.snapshots.num_pending == 0
    _assert_same_snapshots(snaps, _snapshots(cut, prompt))


def test_two_prompts_in_one_pass_snapshot_as_each_alone_and_hits_resume_from_them(tiny_dir):
    a, b, tail = _prompts(2, 30, 19, 9)
    cut = _engine(tiny_dir, graphs=False, in_pass=False)
    one = _engine(tiny_dir, graphs=False)
    want = generate_tokens(cut, [a], [GREEDY]) + generate_tokens(cut, [b], [GREEDY])
    assert generate_tokens(one, [a, b], [GREEDY, GREEDY]) == want  # both prompts in one step
    _assert_same_snapshots(_snapshots(one, a), _snapshots(cut, a))
    _assert_same_snapshots(_snapshots(one, b), _snapshots(cut, b))
    # a prompt sharing a's first 26 tokens resumes at 24 and generates what a cold engine does
    shared = a[:26] + tail
    cold = _engine(tiny_dir, graphs=False, caching=False)
    [out] = [o for o in _run(one, [shared])]
    assert out.num_cached_tokens == 24
    assert out.token_ids == generate_tokens(cold, [shared], [GREEDY])[0]


def _run(engine, prompts):
    from anna_core.testing.engine_run import run_to_completion

    return run_to_completion(engine, prompts, [GREEDY] * len(prompts), prefix="x")


def test_captured_prefill_takes_the_snapshots_and_hits_resume_from_them(tiny_dir, small_buckets):
    [prompt, tail] = _prompts(3, 30, 7)
    graph = _engine(tiny_dir, graphs=True)
    graphs = graph.runner.prefill_graphs
    assert graphs is not None and graphs.checkpoints is not None and graphs.buckets == list(SMALL)
    cut = _engine(tiny_dir, graphs=False, in_pass=False)
    assert generate_tokens(graph, [prompt], [GREEDY]) == generate_tokens(cut, [prompt], [GREEDY])
    assert graph.runner.num_prefill_graph_steps == 1 and graph.runner.num_eager_steps == 0
    _assert_same_snapshots(_snapshots(graph, prompt), _snapshots(cut, prompt))
    shared = prompt[:17] + tail  # resumes at 16: an eager continuation over the snapshot
    cold = _engine(tiny_dir, graphs=False, caching=False)
    [out] = _run(graph, [shared])
    assert out.num_cached_tokens == 16 and out.token_ids == generate_tokens(cold, [shared], [GREEDY])[0]


def test_a_replay_writes_reserved_boundaries_only_and_the_rest_to_the_scratch_entry(tiny_dir, small_buckets):
    engine = _engine(tiny_dir, graphs=True)
    runner, caches, store = engine.runner, engine.runner.caches, engine.snapshot_store
    graphs = runner.prefill_graphs
    scratch = graphs.checkpoints.scratch
    assert scratch == engine.scheduler.snapshots.capacity == store.capacity - 1
    [ids] = _prompts(4, 20)  # bucket 32: boundaries 8, 16 in the prompt, 24 in the padding
    with torch.inference_mode():
        for t in store.conv + store.recurrent:
            t.fill_(float("nan"))
        zero_slots(caches, torch.tensor([0, 1]))
        graphs.run(ids, [list(range(5))], 0, [(8, 3)])
        zero_slots(caches, torch.tensor([1]))
        batch = runner.build_batch(_sched(runner.model, ids[:8], list(range(5, 7)), 1))  # the first 8 tokens eagerly
        runner.model(batch, caches)
    for t, slots in zip(store.conv + store.recurrent, caches.state_caches[0].conv + caches.state_caches[0].recurrent):
        torch.testing.assert_close(t[3], slots[1], rtol=1e-5, atol=1e-6)
        assert torch.isfinite(t[scratch]).all()  # 16 and 24 went to the scratch entry
        untouched = [i for i in range(store.capacity) if i not in (3, scratch)]
        assert torch.isnan(t[untouched]).all()
    with pytest.raises(AnnaError, match="do not fit"):
        graphs.run(ids, [list(range(5))], 0, [(12, 3)])  # not a boundary
    with pytest.raises(AnnaError, match="do not fit"):
        graphs.run(ids, [list(range(5))], 0, [(24, 3)])  # past the prompt
