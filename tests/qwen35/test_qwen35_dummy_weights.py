"""Qwen3.5's dummy weights are a function of the seed alone (its ``A_log`` init hook draws from the seeded
generator, not the global RNG), so two engines on the same dummy Qwen3.5 agree (moved from
tests/core/test_dummy_weights.py, which runs the engine test on anna-core's test family)."""

from __future__ import annotations

import torch
from anna_core.plugins import make_plugin_manager

from tests.bench.tiny_config import write_tiny_qwen35_config
from tests.core import test_dummy_weights


def test_qwen35_dummy_load_ignores_the_global_rng(tmp_path):
    from anna_core.loading import load_model

    d = write_tiny_qwen35_config(tmp_path)
    torch.manual_seed(1)
    a = load_model(d, device="cpu", dtype="fp32", load_format="dummy").model
    torch.manual_seed(2)
    b = load_model(d, device="cpu", dtype="fp32", load_format="dummy").model
    pb = dict(b.named_parameters())
    names = [n for n, _ in a.named_parameters()]
    assert any(n.endswith("A_log") for n in names)
    for name, p in a.named_parameters():
        assert torch.equal(p, pb[name]), name
    a_log = dict(a.named_parameters())["model.layers.0.linear_attn.A_log"]
    assert (a_log.exp() >= 1.0).all() and (a_log.exp() < 16.0).all() and a_log.unique().numel() > 1


def test_prompt_cache_hit_matches_fresh_engine(tmp_path):
    test_dummy_weights.check_prompt_cache_hit_matches_fresh_engine(write_tiny_qwen35_config(tmp_path),
                                                                   pm=make_plugin_manager())
