"""Charging device kernels to the component whose host range contains them (``--profile``)."""

from __future__ import annotations

import pytest
from anna_core.bench.profile import attribute_device_time


def test_kernels_are_charged_to_the_range_holding_their_midpoint():
    ranges = [("mlp", 10.0, 20.0), ("gdn", 0.0, 10.0), ("lm_head", 30.0, 40.0)]
    kernels = [(1.0, 3.0), (8.0, 12.0), (12.0, 19.0), (21.0, 29.0), (35.0, 36.5), (41.0, 42.0)]
    per = attribute_device_time(ranges, kernels)
    # (8, 12) has its midpoint at 10.0: the later range starting there takes it
    assert per == pytest.approx({"gdn": 2.0, "mlp": 4.0 + 7.0, "other": 8.0 + 1.0, "lm_head": 1.5})


def test_no_ranges_charges_everything_to_other():
    assert attribute_device_time([], [(0.0, 2.0), (5.0, 6.0)]) == {"other": 3.0}


def test_only_kernels_copies_and_memsets_count_as_device_work():
    from types import SimpleNamespace

    from anna_core.bench.profile import is_device_work

    kinds = {"kernel": True, "gpu_memcpy": True, "gpu_memset": True, "gpu_user_annotation": False,
             "cuda_sync": False}
    for kind, want in kinds.items():
        assert is_device_work(SimpleNamespace(activity_type=kind, name="x")) is want
    assert not is_device_work(SimpleNamespace(activity_type=None, name="anna::mlp"))  # older torch: by name


def test_nested_ranges_charge_the_innermost():
    per = attribute_device_time([("mlp", 0.0, 10.0), ("norms", 1.0, 2.0)], [(1.2, 1.8), (5.0, 6.0), (11.0, 12.0)])
    assert per == pytest.approx({"norms": 0.6, "mlp": 1.0, "other": 1.0})
