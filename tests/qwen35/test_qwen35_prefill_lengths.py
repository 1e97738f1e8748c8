"""Qwen3.5's prefill lengths under prefix caching: its recurrent-state snapshots are taken inside a prefill pass
(``state_checkpoints``), so the scheduler does not cut prompts at the snapshot boundaries (moved from
tests/core/test_prefill_graphs.py: it needs the Qwen3.5 family)."""

from __future__ import annotations

import pytest

from tests.bench.tiny_config import write_tiny_qwen35_config


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return write_tiny_qwen35_config(tmp_path_factory.mktemp("tinyp"))


def test_graph_lengths_stop_where_the_scheduler_cuts_a_prompt(tiny_dir):
    from anna_core.bench.engine_bench import engine_config
    from anna_core.engine.llm_engine import LLMEngine
    from anna_core.loading import load_model
    from anna_core.model import ModelCapabilities

    loaded = load_model(tiny_dir, device="cpu", dtype="fp32", load_format="dummy")
    plain = LLMEngine.from_loaded(loaded, engine_config(2, 4096, 3000, block_size=16))
    assert plain.longest_one_step_prompt() == 3000  # the step's prefill budget
    cached = LLMEngine.from_loaded(loaded, engine_config(2, 4096, 3000, block_size=16, prefix_caching=True))
    # Qwen3.5 snapshots the recurrent state inside a prefill pass: prompts are not cut at the boundaries
    assert cached.scheduler.checkpoints_in_pass and cached.longest_one_step_prompt() == 3000
    # a hybrid model that cannot snapshots between passes only: prompts are cut every snapshot_interval tokens
    loaded.model.capabilities = ModelCapabilities(padded_prefill=True)
    try:
        cut = LLMEngine.from_loaded(loaded, engine_config(2, 4096, 3000, block_size=16, prefix_caching=True))
    finally:
        del loaded.model.capabilities
    assert cut.scheduler.capture_snapshots and not cut.scheduler.checkpoints_in_pass
    assert cut.longest_one_step_prompt() == cut.config.snapshot_interval
