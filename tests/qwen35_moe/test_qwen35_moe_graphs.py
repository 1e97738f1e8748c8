"""A tiny Qwen3.5 MoE with captured decode and prefill graphs on the CPU, through the fake graph-capable
accelerator of ``tests/core/test_cuda_graphs.py``: now that the model declares ``padded_prefill``, its
prompts replay prefill graphs, and graphs generate the eager engine's tokens.

As in ``tests/gemma4/test_gemma4_graphs.py``, the fake cannot see ``.tolist()``: the CPU reference of
``moe_experts`` (which reads its per-expert counts) passes here; on CUDA the Triton op, which reads
nothing on the host, runs instead."""

from __future__ import annotations

import torch
from anna_core.engine import model_runner
from anna_core.engine.sampling_params import SamplingParams

from tests.core.test_cuda_graphs import _engine, _generate


def test_graph_engine_generates_the_eager_tokens(tiny_moe_factory, monkeypatch):
    monkeypatch.setattr(model_runner, "prefill_buckets", lambda n: [b for b in (8, 16, 32) if b <= n])
    path = tiny_moe_factory(num_experts=16, top_k=4)
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 320, (n,), generator=gen).tolist() for n in (5, 20, 11)]
    params = [SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True) for n in (9, 6, 12)]
    eager, _ = _engine(path, graphs=False)
    ref = _generate(eager, prompts, params)
    graph, accel = _engine(path, graphs=True)
    alone = [_generate(graph, [p], [q]) for p, q in zip(prompts, params)]  # one prompt a step: prefill graphs
    together = _generate(graph, prompts, params)
    assert together == ref and [a[0] for a in alone] == ref
    assert len({tuple(t) for t in ref}) == 3 and all(len(t) == p.max_tokens for t, p in zip(ref, params))
    runner = graph.runner
    assert accel.captures > 0 and runner.num_graph_steps > 0
    assert runner.num_prefill_graph_steps == 6  # 3 prompts alone, then 3 in one split step
    assert accel.replays == runner.num_graph_steps + runner.num_prefill_graph_steps
