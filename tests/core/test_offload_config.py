"""Expert offload settings: flag parsing and validation, the ``auto`` decision with fake sizes, the KV budget
under ``max_device_memory_gib``."""

import pytest
from anna_core.engine.cache_allocator import CAP_HEADROOM_MIN, capped_kv_budget_bytes
from anna_core.engine.config import EngineConfig
from anna_core.engine.offload import (
    MIN_CACHE_BYTES,
    ModelSizes,
    OffloadConfig,
    OffloadConfigError,
    offload_device_bytes,
    parse_layer_indices,
    plan_resident_layers,
    should_offload,
)
from anna_core.errors import AnnaError

GIB = 1 << 30


def test_the_two_resident_flags_set_one_setting():
    assert OffloadConfig.from_flags(resident_expert_layers=3).resident_layers == (0, 1, 2)
    assert OffloadConfig.from_flags(resident_expert_layer_indices="5, 0,2-3").resident_layers == (0, 2, 3, 5)
    assert OffloadConfig.from_flags(resident_expert_layer_indices=[4, 1]).resident_layers == (1, 4)
    assert OffloadConfig.from_flags(resident_expert_layers=0).resident_layers == ()
    assert OffloadConfig.from_flags().resident_layers is None
    with pytest.raises(OffloadConfigError, match="give one of them"):
        OffloadConfig.from_flags(resident_expert_layers=2, resident_expert_layer_indices="0")


def test_from_flags_defaults():
    cfg = OffloadConfig.from_flags()
    assert (cfg.mode, cfg.cached_experts_per_layer, cfg.prefetch) == ("auto", 0, True)
    cfg = OffloadConfig.from_flags("experts", cached_experts_per_layer=16, expert_prefetch=False)
    assert (cfg.mode, cfg.cached_experts_per_layer, cfg.prefetch) == ("experts", 16, False)


@pytest.mark.parametrize("text", ["a", "3-1", "-2", "1,x-4"])
def test_bad_index_lists_are_refused(text):
    with pytest.raises(OffloadConfigError, match="not an index or an a-b range"):
        parse_layer_indices(text)


def test_validation_errors_are_clear():
    with pytest.raises(ValueError, match="offload mode 'sometimes' is not one of auto, none, experts"):
        OffloadConfig(mode="sometimes")
    with pytest.raises(ValueError, match="must not be negative"):
        OffloadConfig(cached_experts_per_layer=-1)
    with pytest.raises(ValueError, match="must not be negative"):
        OffloadConfig.from_flags(resident_expert_layers=-1)
    cfg = OffloadConfig(mode="experts", resident_layers=(0, 39, 40), cached_experts_per_layer=300)
    with pytest.raises(ValueError, match=r"indices \[40\] are out of range: the model has 40 MoE layers \(indices 0..39\)"):
        cfg.check(num_moe_layers=40, num_experts=256)
    with pytest.raises(ValueError, match="cached-experts-per-layer 300 is more than the 256 experts"):
        OffloadConfig(cached_experts_per_layer=300).check(num_moe_layers=40, num_experts=256)
    OffloadConfig(cached_experts_per_layer=256, resident_layers=(39,)).check(40, 256)  # C = E is fine
    with pytest.raises(ValueError, match=r"indices \[40, ..., 49\] are out of range"):
        OffloadConfig.from_flags(resident_expert_layers=50).check(40, 256)
    assert isinstance(OffloadConfigError("x"), AnnaError)  # the CLI prints it as one error line


# 35B-A3B-like sizes: 40 MoE layers of 1.5 GiB experts (256 of 6 MiB), 6 GiB of other weights
SIZES = ModelSizes(total=6 * GIB + 40 * 1536 * (1 << 20), expert_layer=1536 << 20, expert=6 << 20,
                   num_moe_layers=40, num_experts=256)


def test_auto_offloads_only_when_the_weights_and_a_minimum_cache_do_not_fit():
    auto = OffloadConfig()
    assert not should_offload(auto, SIZES, 141 * GIB)  # an H200 holds it
    assert should_offload(auto, SIZES, 24 * GIB)
    assert not should_offload(auto, SIZES, SIZES.total + MIN_CACHE_BYTES)
    assert should_offload(auto, SIZES, SIZES.total + MIN_CACHE_BYTES - 1)
    assert not should_offload(auto, SIZES, None)  # unknown free memory: leave it resident
    assert should_offload(OffloadConfig(mode="experts"), SIZES, 141 * GIB)
    assert not should_offload(OffloadConfig(mode="none"), SIZES, 1 * GIB)


def test_auto_keeps_as_many_leading_layers_resident_as_fit():
    cfg = OffloadConfig(cached_experts_per_layer=16)
    # budget 24 GiB: 6 GiB + n * 1.5 GiB + (40 - n) * 16 * 6 MiB + 256 * 6 MiB scratch + 1 GiB <= 24 GiB
    resident = plan_resident_layers(cfg, SIZES, 24 * GIB, scratch_experts=256)
    n = len(resident)
    assert resident == tuple(range(n))
    assert offload_device_bytes(SIZES, n, 16, 256) + MIN_CACHE_BYTES <= 24 * GIB
    assert offload_device_bytes(SIZES, n + 1, 16, 256) + MIN_CACHE_BYTES > 24 * GIB
    assert n == 8  # (24 - 6 - 1.5 (scratch) - 1 - 40 * 96 MiB) GiB / (1.5 GiB - 96 MiB) = 8.4
    # too small for any resident layer: none, still offloaded
    assert plan_resident_layers(cfg, SIZES, 10 * GIB, scratch_experts=256) == ()
    # given resident layers win; experts mode without them keeps none resident
    assert plan_resident_layers(OffloadConfig(resident_layers=(3, 5)), SIZES, 24 * GIB, 256) == (3, 5)
    assert plan_resident_layers(OffloadConfig(mode="experts"), SIZES, 24 * GIB, 256) == ()


def test_offload_device_bytes_counts_cache_and_scratch():
    assert offload_device_bytes(SIZES, 40, 64, 256) == SIZES.total  # nothing offloaded: no scratch
    assert offload_device_bytes(SIZES, 0, 0, 256) == 6 * GIB + 256 * (6 << 20)
    assert offload_device_bytes(SIZES, 0, 64, 256) == 6 * GIB + (40 * 64 + 256) * (6 << 20)


def test_kv_budget_under_the_cap():
    cap = 24 * GIB
    headroom = int(cap * 0.05)
    assert capped_kv_budget_bytes(cap, 20 * GIB, GIB) == cap - 21 * GIB - headroom
    assert capped_kv_budget_bytes(4 * GIB, GIB, 0) == 3 * GIB - CAP_HEADROOM_MIN  # the minimum headroom
    with pytest.raises(AnnaError, match="leaves no room for the KV cache"):
        capped_kv_budget_bytes(cap, 23 * GIB, GIB)


def test_engine_config_field():
    assert EngineConfig().max_device_memory_gib is None
    assert EngineConfig(max_device_memory_gib=24).max_device_memory_gib == 24
    with pytest.raises(AnnaError, match="max_device_memory_gib must be positive"):
        EngineConfig(max_device_memory_gib=0)
