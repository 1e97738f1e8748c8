"""Gemma 4 with captured decode and prefill graphs on the CPU, through the fake graph-capable accelerator
(``tests/core/_graph_engine.py``): the E2B-style (per-layer embeddings, KV sharing), 31B-style (K = V) and
26B-A4B-style (MoE) tiny models capture their decode and prefill graphs and, replaying them, generate the
eager engine's tokens.

What this does not check: every host read. The fake's dispatch mode fails on ``.item()`` / ``bool(tensor)``
but never sees ``.tolist()``; so the CPU torch references of ``moe_experts`` (its per-expert counts) and
``paged_attention``, which read the host that way, pass here (CUDA takes the Triton kernels: grouped MoE GEMMs
without host reads, and paged attention for every Gemma 4 head dim)."""

from __future__ import annotations

import pytest
from anna_core.engine import model_runner

from tests.core._graph_engine import check_graph_engine_generates_the_eager_tokens


@pytest.mark.parametrize("variant", ["e2b", "dense", "moe"])
def test_graph_engine_generates_the_eager_tokens(gemma4_factory, variant, monkeypatch):
    monkeypatch.setattr(model_runner, "prefill_buckets", lambda n: [b for b in (8, 16, 32) if b <= n])
    check_graph_engine_generates_the_eager_tokens(gemma4_factory(variant=variant))  # 20 > the 16-token window
