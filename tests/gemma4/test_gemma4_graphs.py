"""Gemma 4 with captured decode and prefill graphs on the CPU, through the fake graph-capable accelerator of
``tests/core/test_cuda_graphs.py``: the E2B-style (per-layer embeddings, KV sharing), 31B-style (K = V) and
26B-A4B-style (MoE) tiny models capture their decode and prefill graphs and, replaying them, generate the
eager engine's tokens.

What this does not check: every host read. The fake's dispatch mode fails on ``.item()`` / ``bool(tensor)``
but never sees ``.tolist()``; so the CPU torch references of ``moe_experts`` (its per-expert counts) and
``paged_attention``, which read the host that way, pass here (CUDA takes the Triton kernels: grouped MoE GEMMs
without host reads, and paged attention for every Gemma 4 head dim)."""

from __future__ import annotations

import pytest
import torch
from anna_core.engine import model_runner
from anna_core.engine.sampling_params import SamplingParams

from tests.core.test_cuda_graphs import _engine, _generate


@pytest.mark.parametrize("variant", ["e2b", "dense", "moe"])
def test_graph_engine_generates_the_eager_tokens(gemma4_factory, variant, monkeypatch):
    monkeypatch.setattr(model_runner, "prefill_buckets", lambda n: [b for b in (8, 16, 32) if b <= n])
    path = gemma4_factory(variant=variant)
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 320, (n,), generator=gen).tolist() for n in (5, 20, 11)]  # 20 > the 16-token window
    params = [SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True) for n in (9, 6, 12)]
    eager, _ = _engine(path, graphs=False)
    ref = _generate(eager, prompts, params)
    graph, accel = _engine(path, graphs=True)
    alone = [_generate(graph, [p], [q]) for p, q in zip(prompts, params)]  # one prompt a step: prefill graphs
    together = _generate(graph, prompts, params)
    assert together == ref and [a[0] for a in alone] == ref
    assert all(len(t) == p.max_tokens for t, p in zip(ref, params))
    runner = graph.runner
    assert accel.captures > 0 and runner.num_graph_steps > 0
    assert runner.num_prefill_graph_steps == 6  # 3 prompts alone, then 3 in one split step
    assert accel.replays == runner.num_graph_steps + runner.num_prefill_graph_steps
