"""The tiny model of core's engine, runner and graph tests: anna-core's own test family
(:mod:`anna_core.testing.cache_groups_family`: ``CacheGroupsLM``, a full-attention, a sliding-window, a KV-sharing
and a recurrent layer), loaded from a folder, so these tests need no family plugin installed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from anna_core.testing.cache_groups_family import plugin_manager, write_config


def write_tiny_config(folder: Path, **overrides: Any) -> Path:
    """A tiny test-family folder (``config.json`` only; vocabulary 256, sliding window 8)."""
    return write_config(folder, **{"vocab_size": 256, **overrides})


def load_tiny(model_dir: Path, **kwargs: Any) -> Any:
    """``load_model(model_dir, device="cpu", dtype="fp32", load_format="dummy")`` through the test family and every
    installed plugin (other distributions' tests reuse these helpers on their own families' folders)."""
    from anna_core.loading import load_model

    pm = plugin_manager(load_entry_points=True)
    return load_model(model_dir, device="cpu", dtype="fp32", load_format="dummy", pm=pm, **kwargs)
