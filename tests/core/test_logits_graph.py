"""Decode steps whose requests the captured sampler does not serve (penalties, ``min_tokens`` over stop
ids, logit bias, logprobs) replay the "logits" graph and sample eagerly. Mixed with requests that the
captured sampler does serve, with asynchronous scheduling on and off, prefix caching and preemption,
every request must get exactly the tokens, finish reasons and logprobs of the eager engine.

Exercised on the CPU through the fake graph-capable accelerator of ``test_cuda_graphs``.
"""

from __future__ import annotations

import functools

import pytest
import torch
from anna_core.engine.request import PENDING
from anna_core.engine.sampling_params import SamplingParams

from tests.core._graph_engine import graph_engine
from tests.core._tiny_family import write_tiny_config

KINDS = [  # cycled over the requests: the captured sampler serves the first two, the eager one the rest
    lambda n: SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True),
    lambda n: SamplingParams(max_tokens=n, temperature=0.8, top_k=30, seed=7, ignore_eos=True),
    lambda n: SamplingParams(max_tokens=n, temperature=0.0, repetition_penalty=1.4, frequency_penalty=0.3,
                             ignore_eos=True),
    lambda n: SamplingParams(max_tokens=n, temperature=0.0, logprobs=3, ignore_eos=True),
    lambda n: SamplingParams(max_tokens=n, temperature=0.9, seed=11, min_tokens=min(3, n), stop_token_ids=[5, 9, 77],
                             ignore_eos=True),
    lambda n: SamplingParams(max_tokens=n, temperature=0.7, seed=5, logit_bias={17: 4.0, 40: -100.0}, ignore_eos=True),
]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return write_tiny_config(tmp_path_factory.mktemp("tinyq_logits"))


def _engine(model_dir, *, graphs: bool, async_scheduling: bool = True, num_blocks: int | None = None,
            prefix_caching: bool = False):
    return graph_engine(model_dir, graphs=graphs, async_scheduling=async_scheduling, num_blocks=num_blocks or 72,
                        prefix_caching=prefix_caching)


def _count_logits_replays(engine) -> list[int]:
    sizes: list[int] = []
    graphs = engine.runner.graphs
    run_logits = graphs.run_logits

    def counting(token_ids, *args, **kwargs):
        sizes.append(len(token_ids))
        return run_logits(token_ids, *args, **kwargs)

    graphs.run_logits = counting
    return sizes


def _drive(engine, schedule):
    """Add each ``(arrival step, prompt, params)`` at its step, run to the end; per request: tokens,
    finish and stop reasons, and every streamed logprob (id, rounded value, top ids)."""
    streamed, logprobs, final = {}, {}, {}
    waiting = list(enumerate(schedule))
    step = 0
    while waiting or engine.has_unfinished():
        for i, (_arrival, prompt, params) in [w for w in waiting if w[1][0] <= step]:
            engine.add_request(f"r{i}", prompt, params)
        waiting = [w for w in waiting if w[1][0] > step]
        for out in engine.step():
            assert PENDING not in out.delta_token_ids
            streamed.setdefault(out.request_id, []).extend(out.delta_token_ids)
            logprobs.setdefault(out.request_id, []).extend(out.logprobs)
            if out.finished:
                final[out.request_id] = out
        step += 1
        assert step < 500
    return {rid: (o.token_ids, streamed[rid] == o.token_ids, o.finish_reason, o.stop_reason,
                  [(e.token_id, round(e.logprob, 4), [t for t, _ in e.top]) for e in logprobs[rid]])
            for rid, o in final.items()}


def _schedule(n: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        prompt = torch.randint(2, 256, (int(torch.randint(3, 12, (1,), generator=gen)),), generator=gen).tolist()
        new = int(torch.randint(1, 12, (1,), generator=gen))
        out.append((int(torch.randint(0, 12, (1,), generator=gen)), prompt, KINDS[(i + seed) % len(KINDS)](new)))
    return out


@pytest.mark.parametrize("seed, num_blocks, prefix_caching", [(0, None, False), (1, 14, True)],
                         ids=["plain", "preempting-prefix-cache"])
def test_mixed_batches_match_the_eager_engine(tiny_dir, seed, num_blocks, prefix_caching):
    schedule = _schedule(8, seed)
    want = _drive(_engine(tiny_dir, graphs=False, async_scheduling=False, num_blocks=num_blocks,
                          prefix_caching=prefix_caching), schedule)
    for async_scheduling in (True, False):
        engine = _engine(tiny_dir, graphs=True, async_scheduling=async_scheduling, num_blocks=num_blocks,
                         prefix_caching=prefix_caching)
        logits_replays = _count_logits_replays(engine)
        assert _drive(engine, schedule) == want, async_scheduling
        assert logits_replays and engine.runner.num_graph_steps > len(logits_replays)  # both graph paths ran


@pytest.mark.parametrize("modes", [("greedy", "sample"), ("greedy", "logits"), ("logits",)])
def test_graphs_of_some_modes_only_fall_back_for_the_rest(tiny_dir, monkeypatch, modes):
    """A mode that was not captured sends its steps to another graph or the eager path, never to an error."""
    import anna_core.engine.model_runner as model_runner

    monkeypatch.setattr(model_runner, "DecodeGraphs", functools.partial(model_runner.DecodeGraphs, modes=modes))
    schedule = _schedule(6, 2)
    want = _drive(_engine(tiny_dir, graphs=False, async_scheduling=False), schedule)
    engine = _engine(tiny_dir, graphs=True)
    assert engine.runner.graphs.modes == modes
    assert _drive(engine, schedule) == want
    if "logits" in modes:  # without it, every decode step here has a request the captured sampler lacks
        assert engine.runner.num_graph_steps > 0


def test_a_pending_input_token_is_an_error_not_garbage(tiny_dir):
    from anna_core.errors import AnnaError

    engine = _engine(tiny_dir, graphs=True, async_scheduling=False)
    engine.add_request("r0", [1, 2, 3], SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True))
    engine.step()  # the prefill
    out = engine.scheduler.schedule()
    assert out.is_decode
    out.seqs[0].token_ids[0] = PENDING
    with pytest.raises(AnnaError, match="pending"):
        engine.runner.execute(out)


def test_the_logits_buffer_takes_the_width_of_the_models_logits(tiny_dir, monkeypatch):
    """A family whose logits are wider than its vocab_size (a padded LM head): the buffer is sized from
    the logits themselves, so the capture still succeeds and the steps match the eager engine."""
    from anna_core.engine.model_runner import ModelRunner

    real_setup = ModelRunner.setup

    def setup_with_padded_logits(self, *args, **kwargs):
        compute = self.model.compute_logits
        self.model.compute_logits = lambda hidden: torch.nn.functional.pad(compute(hidden), (0, 4), value=float("-inf"))
        return real_setup(self, *args, **kwargs)

    monkeypatch.setattr(ModelRunner, "setup", setup_with_padded_logits)
    schedule = [(0, [3, 4, 5], KINDS[2](6)), (1, [9, 8], KINDS[3](5))]
    want = _drive(_engine(tiny_dir, graphs=False, async_scheduling=False), schedule)
    engine = _engine(tiny_dir, graphs=True)
    assert engine.runner.graphs is not None  # captured, not left eager
    vocab = engine.runner.graphs.vocab_size
    assert _drive(engine, schedule) == want
    assert engine.runner.graphs.logits_out.shape == (4, vocab + 4) and engine.runner.num_graph_steps > 0
