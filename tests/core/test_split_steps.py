"""Split steps (``StepPath.SPLIT``, :meth:`ModelRunner.split`): a step of decodes and prompts runs the decodes as
their captured decode graph and the prompts as one prefill graph each (or one eager pass), on the CPU
through the fake graph-capable accelerator of ``test_cuda_graphs``. Requests arrive while others decode, as
on a server, and every token equals the eager engine's."""

from __future__ import annotations

import pytest
import torch
from anna_core.engine import model_runner
from anna_core.engine.model_runner import RunnerConfig
from anna_core.engine.sampling_params import SamplingParams
from anna_core.engine.sched_output import StepPath
from anna_core.errors import AnnaError
from anna_core.testing.fake_graphs import FakeGraphAccelerator

from tests.core._tiny_family import write_tiny_config

SMALL = (8, 12, 16, 32)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return write_tiny_config(tmp_path_factory.mktemp("tinys"), padded_prefill=True)  # prefill graphs


@pytest.fixture
def small_buckets(monkeypatch):
    monkeypatch.setattr(model_runner, "prefill_buckets", lambda n: [b for b in SMALL if b <= n])


def _engine(model_dir, *, graphs: bool, replays: int = 4, prefix_caching: bool = False, max_seqs: int = 6):
    from anna_core.bench.engine_bench import engine_config
    from anna_core.engine.llm_engine import LLMEngine

    from tests.core._tiny_family import load_tiny

    loaded = load_tiny(model_dir)
    engine = LLMEngine.from_loaded(loaded, engine_config(max_seqs, 80, 64, block_size=4, prefix_caching=prefix_caching))
    engine.runner.accel = FakeGraphAccelerator()
    engine.runner.setup(RunnerConfig(cuda_graph=graphs, max_prefill_replays=replays),
                        max_model_len=engine.max_model_len, max_num_seqs=max_seqs)
    return engine


def _staggered(engine, prompts, params, arrive_at):
    """Request ``i`` is added before step ``arrive_at[i]``; returns each request's tokens and, per step, its
    path and for a split step ``(decodes, prompts, replayed)``."""
    steps = []
    runner = engine.runner
    execute = runner.execute

    def traced(out, **kw):
        parts = runner.split(out) if runner.plan(out) is StepPath.SPLIT else None
        result = execute(out, **kw)
        steps.append((result.path, None if parts is None else
                      (len(parts[0].seqs) if parts[0] is not None else 0, len(parts[1].seqs), parts[2])))
        return result

    runner.execute = traced
    final, step = {}, 0
    pending = sorted(range(len(prompts)), key=lambda i: arrive_at[i])
    while pending or engine.has_unfinished():
        while pending and arrive_at[pending[0]] <= step:
            i = pending.pop(0)
            engine.add_request(f"r{i}", prompts[i], params[i])
        for out in engine.step():
            if out.finished:
                final[out.request_id] = out.token_ids
        step += 1
    runner.execute = execute
    return [final[f"r{i}"] for i in range(len(prompts))], steps


def _prompts(lengths, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (n,), generator=gen).tolist() for n in lengths]


@pytest.mark.parametrize("prefix_caching", [False, True])
def test_arrivals_during_decodes_split_and_match_the_eager_engine(tiny_dir, small_buckets, prefix_caching):
    lengths = (9, 14, 5, 40, 12, 7, 20)  # 40 tokens exceed the largest bucket: its chunk runs eagerly
    prompts = _prompts(lengths)
    arrive = [0, 2, 3, 5, 5, 8, 9]  # two arrive together at step 5
    greedy = [SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True) for _ in prompts]
    seeded = [SamplingParams(max_tokens=8, temperature=0.9, top_k=30, seed=s, ignore_eos=True) for s in range(7)]
    for params in (greedy, seeded):
        eager = _engine(tiny_dir, graphs=False, prefix_caching=prefix_caching)
        graph = _engine(tiny_dir, graphs=True, prefix_caching=prefix_caching)
        ref, eager_steps = _staggered(eager, prompts, params, arrive)
        got, steps = _staggered(graph, prompts, params, arrive)
        assert got == ref
        assert {p for p, _ in eager_steps} == {StepPath.EAGER}
        split = [parts for p, parts in steps if p is StepPath.SPLIT]
        assert steps[0][0] is StepPath.PREFILL_GRAPH and StepPath.DECODE_GRAPH in {p for p, _ in steps}
        # every later arrival joined running decodes; the two of step 5 (one too long for a graph) ran eagerly
        assert (1, 1, True) in split and (2, 1, True) in split
        assert any(d > 0 and not replayed for d, _, replayed in split)
        assert all(d > 0 or replayed for d, _, replayed in split)
        runner = graph.runner
        assert runner.num_split_steps == len(split)
        assert runner.num_eager_steps == sum(1 for p, _ in steps if p is StepPath.EAGER) + sum(
            1 for _, _, replayed in split if not replayed)
        assert runner.num_prefill_graph_steps == 1 + sum(n for _, n, replayed in split if replayed)


def test_fresh_prompts_together_replay_their_graphs_up_to_the_limit(tiny_dir, small_buckets):
    prompts = _prompts((9, 14, 5))
    params = [SamplingParams(max_tokens=5, temperature=0.0, ignore_eos=True) for _ in prompts]
    ref, _ = _staggered(_engine(tiny_dir, graphs=False), prompts, params, [0, 0, 0])
    got, steps = _staggered(_engine(tiny_dir, graphs=True), prompts, params, [0, 0, 0])
    assert got == ref and steps[0] == (StepPath.SPLIT, (0, 3, True))
    got, steps = _staggered(_engine(tiny_dir, graphs=True, replays=2), prompts, params, [0, 0, 0])
    assert got == ref and steps[0] == (StepPath.EAGER, None)  # three prompts: one eager pass reads the weights once
    got, steps = _staggered(_engine(tiny_dir, graphs=True, replays=0), prompts, params, [0, 1, 1])
    assert got == ref
    assert steps[0] == (StepPath.PREFILL_GRAPH, None) and steps[1] == (StepPath.SPLIT, (1, 2, False))


def test_decodes_the_captured_sampler_cannot_serve_split_through_the_logits_graph(tiny_dir, small_buckets):
    prompts = _prompts((9, 14, 6), seed=1)
    params = [SamplingParams(max_tokens=6, temperature=0.0, repetition_penalty=1.3, ignore_eos=True),
              SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True, logprobs=2),
              SamplingParams(max_tokens=6, temperature=0.7, seed=4, ignore_eos=True)]
    ref, _ = _staggered(_engine(tiny_dir, graphs=False), prompts, params, [0, 2, 4])
    got, steps = _staggered(_engine(tiny_dir, graphs=True), prompts, params, [0, 2, 4])
    assert got == ref
    assert [parts for p, parts in steps if p is StepPath.SPLIT] == [(1, 1, True), (2, 1, True)]


def test_the_replay_limit_is_validated():
    with pytest.raises(AnnaError, match="max_prefill_replays"):
        RunnerConfig(max_prefill_replays=-1)
