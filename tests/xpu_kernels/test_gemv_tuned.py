"""The decode GEMV's per-device tuned configurations and the in-step tuner's search (CPU)."""

import pytest
import torch
from anna_core.kernels.reference.linear import linear as ref_linear

from tests.xpu_kernels._interp import require_triton_interpreter, tol

require_triton_interpreter()

from anna_xpu_kernels import gemv, gemv_tuning, tune_in_step
from anna_xpu_kernels.gemv_tuning import GemvConfig


def test_table_round_trip_and_device_file_names(tmp_path):
    key = ("bfloat16", 1, 12288, 2048, 2, 1)
    table = {key: GemvConfig(block_n=4, block_k=512, split_k=1, use_dot=False, num_warps=2, num_stages=3)}
    path = tmp_path / "t.json"
    path.write_text(gemv_tuning.dump_tuned_table(table, "NVIDIA H200"))
    assert gemv_tuning.load_tuned_table(path) == table
    assert gemv_tuning.load_tuned_table(tmp_path / "missing.json") == {}
    assert gemv_tuning.tuned_table_path("NVIDIA H200").name == "gemv_nvidia_h200.json"
    path.write_text('{"configs": [{"dtype": "bfloat16"}]}')
    with pytest.raises(ValueError, match="not a GEMV tuning table"):
        gemv_tuning.load_tuned_table(path)


def test_no_tuned_config_off_cuda():
    x = torch.zeros(1, 64)
    assert gemv_tuning.tuned_config(x, 1, 32, 64, 0, 0) is None


def test_launch_takes_the_tuned_config(monkeypatch, poison_outputs):
    # a listed shape runs the listed configuration (split-K here), not the autotuner's
    seen = []
    cfg = GemvConfig(block_n=8, block_k=16, split_k=2, use_dot=False, num_warps=4)

    def tuned(x, block_m, n, k, prologue, epilogue):
        seen.append((block_m, n, k, prologue, epilogue))
        return cfg if (n, k) == (24, 64) else None

    monkeypatch.setattr(gemv_tuning, "tuned_config", tuned)
    monkeypatch.setenv("ANNA_GEMV_PERSISTENT", "0")  # one row takes the one-wave kernel otherwise
    gen = torch.Generator().manual_seed(3)
    x, w = torch.randn(1, 64, generator=gen), torch.randn(24, 64, generator=gen) / 8
    torch.testing.assert_close(gemv.linear(x, w, None), ref_linear(x, w, None), **tol(torch.float32))
    assert seen == [(1, 24, 64, 0, 0)]


def test_candidates_are_the_pruned_tuning_space():
    cands = tune_in_step.candidates(("bfloat16", 1, 2048, 2048, 0, 0))
    assert cands and len(set(cands)) == len(cands)
    assert all(c.split_k * c.block_k * 2 <= 2048 for c in cands if c.split_k > 1)
    assert not any(c.split_k > 1 for c in tune_in_step.candidates(("bfloat16", 1, 248320, 2048, 0, 0)))


def test_sweep_keeps_only_clear_gains(monkeypatch):
    a, b = ("bfloat16", 1, 64, 64, 0, 0), ("bfloat16", 1, 32, 32, 0, 0)
    c1, c2, c3 = (GemvConfig(block_n=n, block_k=16) for n in (4, 8, 16))
    monkeypatch.setattr(tune_in_step, "candidates", lambda key: [c1, c2, c3])
    keys = {a: c1, b: c1}
    cost = {c1: 10.0, c2: 9.0, c3: 9.99}  # c2 saves 10% on a; c3 only 0.1% on b

    def time_step():
        return cost[keys[a]] + (cost[keys[b]] if keys[b] is not c2 else 10.0)

    got = tune_in_step.sweep(keys, time_step, min_gain=0.003, log=lambda s: None)
    assert got[a] == c2 and got[b] == c1  # b's 0.1% is within the noise margin


def test_sweep_skips_a_failing_candidate(monkeypatch):
    a = ("bfloat16", 1, 64, 64, 0, 0)
    c1, c2 = GemvConfig(block_n=4, block_k=16), GemvConfig(block_n=8, block_k=16)
    monkeypatch.setattr(tune_in_step, "candidates", lambda key: [c1, c2])
    keys = {a: c1}

    def time_step():
        if keys[a] == c2:
            raise RuntimeError("out of resources")
        return 1.0

    assert tune_in_step.sweep(keys, time_step, min_gain=0.0, log=lambda s: None) == {a: c1}
