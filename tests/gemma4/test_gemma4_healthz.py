"""What ``/healthz`` says about how a served Gemma 4 runs: the same serving paths as any family (paged KV,
prefix caching, decode and prefill graphs), no Gemma-specific gap.

Each tiny variant is built as ``anna serve`` builds it (:func:`anna_core.tasks.generate.build` with a
warm-up and graph capture, then :func:`~anna_core.tasks.generate.start`) and served by the real app
in-process (litestar's ``TestClient``, no socket). On the CPU the runner's device cannot capture graphs,
so ``/healthz`` says so and shows the model-level capability (``padded_prefill``); with the fake
graph-capable accelerator (:mod:`anna_core.testing.fake_graphs`) both kinds are captured, ``/healthz``
lists them, and a request's steps replay them (the runner's plan, counted by its step counters).

What the fake cannot show (see ``test_gemma4_graphs.py``): where only the ``moe_experts`` torch reference
serves the 26B-A4B-style MoE block on CUDA, it reads the per-expert counts on the host, which fails a real
capture; ``/healthz`` then gives the capture error as ``why_not`` and those steps run eagerly.
"""

from __future__ import annotations

import pytest
from anna_core.engine import model_runner
from anna_core.engine.config import EngineConfig
from anna_core.engine.model_runner import RunnerConfig
from anna_core.loading import load_model
from anna_core.server.app import create_app
from anna_core.server.state import ServerState
from anna_core.tasks.generate import build, start
from anna_core.testing.fake_graphs import FakeGraphAccelerator
from litestar.testing import TestClient

from tests.gemma4.tiny import VARIANTS

BUCKETS = (8, 16, 32)


def _healthz(path, *, fake_graphs: bool, monkeypatch, request: str | None = None):
    """``(GET /healthz body, the served LLMEngine)`` for the checkpoint at ``path``, after one completion of
    ``request`` (a prompt) when given."""
    if fake_graphs:
        monkeypatch.setattr(model_runner, "accelerator", lambda device: FakeGraphAccelerator())
    monkeypatch.setattr(model_runner, "prefill_buckets", lambda n: [b for b in BUCKETS if b <= n])
    loaded = load_model(path, device="cpu", dtype="fp32")
    config = EngineConfig(max_num_seqs=4, max_model_len=128, block_size=8, num_blocks=96,
                          enable_prefix_caching=True)
    engine = build(loaded, config, RunnerConfig())
    client = start(engine)
    try:
        state = ServerState(model_name="tiny-gemma4")
        state.set_ready(client, loaded.tokenizer, max_model_len=engine.max_model_len,
                        eos_token_ids=loaded.generation.eos_token_ids,
                        info={"family": loaded.family, "device": str(loaded.device), "dtype": "float32"})
        with TestClient(create_app(state)) as http:
            if request is not None:
                body = {"model": "tiny-gemma4", "prompt": request, "max_tokens": 4, "temperature": 0}
                assert http.post("/v1/completions", json=body).status_code == 200
            return http.get("/healthz").json(), engine
    finally:
        import asyncio

        asyncio.run(client.shutdown(drain=False))


def _serving_paths(health: dict) -> dict:
    e = health["engine"]
    assert health["family"] == "gemma4" and health["status"] == "ready"
    assert e["paged_kv"] and e["block_size"] == 8 and e["prefix_caching"]
    assert [g["kind"] for g in e["cache_groups"]] == ["sliding_window", "full_attention"]
    return e["graphs"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_healthz_on_the_cpu_names_the_device_as_the_only_gap(gemma4_factory, variant, monkeypatch):
    health, engine = _healthz(gemma4_factory(variant=variant), fake_graphs=False, monkeypatch=monkeypatch)
    graphs = _serving_paths(health)
    why = "the cpu device does not capture graphs"
    assert graphs["decode"] == {"captured": False, "batch_sizes": [], "modes": [], "why_not": why}
    # the model-level capability prefill graphs need is there; only the device lacks graphs
    assert graphs["prefill"] == {"model_supports": True, "captured": False, "prompt_lengths": [], "why_not": why}
    assert engine.model.capabilities.padded_prefill


@pytest.mark.parametrize("variant", VARIANTS)
def test_healthz_with_graphs_lists_both_kinds_and_steps_replay_them(gemma4_factory, variant, monkeypatch):
    prompt = "hello world " * 3
    health, engine = _healthz(gemma4_factory(variant=variant), fake_graphs=True, monkeypatch=monkeypatch,
                              request=prompt)
    graphs = _serving_paths(health)
    assert graphs["decode"]["captured"] and graphs["decode"]["why_not"] is None
    assert graphs["decode"]["batch_sizes"] == [1, 2, 4] and "greedy" in graphs["decode"]["modes"]
    assert graphs["prefill"] == {"model_supports": True, "captured": True, "prompt_lengths": list(BUCKETS),
                                 "why_not": None}
    runner = engine.runner
    assert len(engine.tokenizer.encode(prompt)) <= BUCKETS[-1]
    assert runner.num_prefill_graph_steps == 1 and runner.num_graph_steps == 3  # the prompt, then 3 decodes
    assert runner.num_eager_steps == 0
    assert health["engine"]["tokens_generated"] == 4


def test_a_model_without_padded_prefill_is_reported_so(monkeypatch, tmp_path):
    """The same fields say why when a model lacks the capability (a Qwen3.5 MoE model with its
    ``padded_prefill`` declaration taken away), so the Gemma 4 rows above are a real comparison."""
    pytest.importorskip("anna_qwen35")
    from anna_core.model import ModelCapabilities
    from anna_qwen35.model import Qwen35ForCausalLM
    from anna_qwen35.tiny import build_tiny_qwen35_moe

    monkeypatch.setattr(Qwen35ForCausalLM, "capabilities", ModelCapabilities(padded_prefill=False,
                                                                             state_checkpoints=True))

    health, _ = _healthz(build_tiny_qwen35_moe(tmp_path / "moe"), fake_graphs=True, monkeypatch=monkeypatch)
    e = health["engine"]
    assert e["paged_kv"] and e["graphs"]["decode"]["captured"]
    assert e["graphs"]["prefill"] == {"model_supports": False, "captured": False, "prompt_lengths": [],
                                      "why_not": "the model does not declare padded_prefill"}
