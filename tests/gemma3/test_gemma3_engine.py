"""Gemma 3 through Anna's engine: the family is chosen from config.json, greedy tokens match HF, and
batching, prefix-cache hits and chunked prefill change no token and no logit (the test engines of
``tests/gemma4/test_gemma4_engine.py``)."""

from __future__ import annotations

import pytest
from anna_core.cache_spec import FullAttentionSpec, SlidingWindowSpec

from tests.gemma3.conftest import load_anna
from tests.gemma3.tiny import WINDOW
from tests.gemma4.engine_checks import (
    check_batched_requests_equal_each_alone,
    check_chunked_prefill_equals_one_pass,
    check_llm_picks_the_family_from_config_and_matches_hf,
    check_prefix_hit_gives_the_logits_of_a_miss,
)


@pytest.fixture(scope="module")
def loaded(gemma3_factory):
    return load_anna(gemma3_factory(layout="conditional"))


@pytest.fixture(scope="module")
def base():
    import torch

    return torch.randint(3, 320, (120,), generator=torch.Generator().manual_seed(11)).tolist()


def test_llm_picks_the_family_from_config_and_matches_hf(gemma3_factory, base, tmp_path):
    path = gemma3_factory(layout="causal")
    check_llm_picks_the_family_from_config_and_matches_hf(path, "gemma3", "gemma-4-e2b", base, tmp_path)


def test_cache_groups(loaded):
    sliding, full = loaded.model.cache_spec.groups
    assert isinstance(sliding, SlidingWindowSpec) and isinstance(full, FullAttentionSpec)
    assert sliding.window == WINDOW and sliding.layers == (0, 1, 3, 4, 6) and full.layers == (2, 5)
    assert (sliding.head_dim, sliding.num_kv_heads) == (full.head_dim, full.num_kv_heads) == (16, 2)


def test_batched_requests_equal_each_alone(loaded, base):
    check_batched_requests_equal_each_alone(loaded, base)


def test_prefix_hit_gives_the_logits_of_a_miss(loaded, base):
    check_prefix_hit_gives_the_logits_of_a_miss(loaded, base)


def test_chunked_prefill_equals_one_pass(loaded, base):
    check_chunked_prefill_equals_one_pass(loaded, base)
