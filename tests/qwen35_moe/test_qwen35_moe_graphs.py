"""A tiny Qwen3.5 MoE with captured decode and prefill graphs on the CPU, through the fake graph-capable
accelerator (``tests/core/_graph_engine.py``): now that the model declares ``padded_prefill``, its
prompts replay prefill graphs, and graphs generate the eager engine's tokens.

As in ``tests/gemma4/test_gemma4_graphs.py``, the fake cannot see ``.tolist()``: the CPU reference of
``moe_experts`` (which reads its per-expert counts) passes here; on CUDA the Triton op, which reads
nothing on the host, runs instead."""

from __future__ import annotations

from anna_core.engine import model_runner

from tests.core._graph_engine import check_graph_engine_generates_the_eager_tokens


def test_graph_engine_generates_the_eager_tokens(tiny_moe_factory, monkeypatch):
    monkeypatch.setattr(model_runner, "prefill_buckets", lambda n: [b for b in (8, 16, 32) if b <= n])
    ref = check_graph_engine_generates_the_eager_tokens(tiny_moe_factory(num_experts=16, top_k=4))
    assert len({tuple(t) for t in ref}) == 3
