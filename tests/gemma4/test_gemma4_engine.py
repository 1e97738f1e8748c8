"""Gemma 4 through Anna's engine: the family is chosen from config.json, greedy tokens match HF, and
batching, prefix-cache hits and chunked prefill change no token and no logit. The sliding-window group
holds a bounded number of blocks per sequence however long it generates."""

from __future__ import annotations

import pytest
import torch
from anna_core import SamplingParams
from anna_core.cache_spec import FullAttentionSpec, SlidingWindowSpec

from tests.gemma4.conftest import load_anna
from tests.gemma4.engine_checks import (
    BLOCK,
    check_batched_requests_equal_each_alone,
    check_chunked_prefill_equals_one_pass,
    check_llm_picks_the_family_from_config_and_matches_hf,
    check_prefix_hit_gives_the_logits_of_a_miss,
    engine,
    run,
)
from tests.gemma4.tiny import WINDOW


@pytest.fixture(scope="module", params=["e2b", "moe"])
def loaded(request, gemma4_factory):
    return load_anna(gemma4_factory(variant=request.param, layout="conditional"))


@pytest.fixture(scope="module")
def base():
    return torch.randint(3, 320, (120,), generator=torch.Generator().manual_seed(7)).tolist()


def test_llm_picks_the_family_from_config_and_matches_hf(gemma4_factory, base, tmp_path):
    path = gemma4_factory(variant="e2b", layout="causal")
    check_llm_picks_the_family_from_config_and_matches_hf(path, "gemma4", "llama-3-8b", base, tmp_path)


def test_batched_requests_equal_each_alone(loaded, base):
    check_batched_requests_equal_each_alone(loaded, base)


def test_prefix_hit_gives_the_logits_of_a_miss(loaded, base):
    check_prefix_hit_gives_the_logits_of_a_miss(loaded, base)
    # both cache groups served the hit: the full group shares the whole prefix, the sliding one its window
    kinds = {type(g) for g in loaded.model.cache_spec.groups}
    assert kinds == {SlidingWindowSpec, FullAttentionSpec}


def test_chunked_prefill_equals_one_pass(loaded, base):
    check_chunked_prefill_equals_one_pass(loaded, base)


def test_sliding_group_blocks_per_sequence_stay_bounded(loaded, base):
    spec = loaded.model.cache_spec
    sliding = next(g for g, s in enumerate(spec.groups) if isinstance(s, SlidingWindowSpec))
    full = next(g for g, s in enumerate(spec.groups) if type(s) is FullAttentionSpec)
    bound = -(-WINDOW // BLOCK) + 1
    eng = engine(loaded, enable_prefix_caching=False, prompt_cache_size=0)
    held = {"sliding": [], "full": []}

    def watch(out):
        if not out.finished:
            held["sliding"].append(eng.kv.groups[sliding].num_held("long0"))
            held["full"].append(eng.kv.groups[full].num_held("long0"))

    params = SamplingParams(temperature=0.0, max_tokens=80, ignore_eos=True)
    [out] = run(eng, [base[:40]], params, prefix="long", on_output=watch)
    assert len(out.token_ids) == 80 and len(held["sliding"]) >= 79  # 120 tokens: 7.5 windows
    assert max(held["sliding"]) <= bound
    assert held["full"][-1] >= (40 + 79) // BLOCK  # the global group keeps the whole context
