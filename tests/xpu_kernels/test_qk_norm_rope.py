"""Fused q/k RMSNorm + partial rotary + paged-cache write vs the torch reference ops (interpreter)."""

import pytest
import torch
from anna_core.kernels.reference import norms as ref_norms
from anna_core.kernels.reference import paged_attention as ref_pa
from anna_core.kernels.reference import qk_norm_rope as ref_qk
from anna_core.layers.rotary import RotaryEmbedding

from tests.xpu_kernels._interp import require_triton_interpreter, tol

require_triton_interpreter()

from anna_xpu_kernels.qk_norm_rope import qk_norm_rope_cache

BLOCK = 4


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("dim,rotary_dim", [(32, 8), (24, 24)])
def test_matches_norm_rotary_and_reshape_and_cache(poison_outputs, dtype, dim, rotary_dim):
    gen = torch.Generator().manual_seed(dim + rotary_dim)
    T, h_q, h_kv = 5, 4, 2
    merged = torch.randn(T, 2 * h_q * dim + 2 * h_kv * dim, generator=gen).to(dtype)
    q = merged[:, : 2 * h_q * dim].view(T, h_q, 2 * dim)[..., :dim]  # the query half of q+gate, strided
    k, v = merged[:, 2 * h_q * dim:].view(T, 2 * h_kv, dim).split(h_kv, dim=1)
    qw = (0.2 * torch.randn(dim, generator=gen)).to(dtype)
    kw = (0.2 * torch.randn(dim, generator=gen)).to(dtype)
    positions = torch.tensor([0, 7, 3, 100, 4095])
    rope = RotaryEmbedding(dim, rotary_dim, {"rope_theta": 10000.0, "mrope_section": [2, 1, 1][: 3],
                                             "mrope_interleaved": True} if rotary_dim == 8 else {"rope_theta": 1e6})
    slots = torch.tensor([9, 2, 14, 0, 5])
    caches = [torch.full((4, BLOCK, h_kv, dim), float("nan"), dtype=dtype) for _ in range(4)]
    got = qk_norm_rope_cache(q, k, v, qw, kw, 1e-6, True, positions, rope._inv_freq, caches[0], caches[1], slots)

    qn = ref_norms.rms_norm(q, qw, 1e-6, True)
    kn = ref_norms.rms_norm(k, kw, 1e-6, True)
    want_q, want_k = rope(positions, qn, kn)
    ref_pa.reshape_and_cache(want_k, v, caches[2], caches[3], slots)
    assert got.dtype == dtype and got.shape == (T, h_q, dim)
    t = tol(dtype) if dtype == torch.float32 else {"atol": 3e-2, "rtol": 3e-2}  # two bf16 roundings
    torch.testing.assert_close(got, want_q, **t)
    torch.testing.assert_close(caches[0], caches[2], equal_nan=True, **t)  # unwritten slots stay NaN in both
    torch.testing.assert_close(caches[1], caches[3], equal_nan=True, **t)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_matches_the_op_reference(poison_outputs, dtype):
    """The Triton kernel against the ``qk_norm_rope_cache`` op's torch reference (anna-core)."""
    gen = torch.Generator().manual_seed(3)
    T, h_q, h_kv, dim = 4, 4, 2, 32
    q = torch.randn(T, h_q, dim, generator=gen).to(dtype)
    k, v = torch.randn(2, T, h_kv, dim, generator=gen).to(dtype)
    qw, kw = (0.2 * torch.randn(2, dim, generator=gen)).to(dtype)
    positions = torch.tensor([3, 0, 11, 250])
    inv_freq = RotaryEmbedding(dim, 16, {"rope_theta": 1e6})._inv_freq
    slots = torch.tensor([1, 6, 2, 13])
    caches = [torch.zeros(4, BLOCK, h_kv, dim, dtype=dtype) for _ in range(4)]
    got = qk_norm_rope_cache(q, k, v, qw, kw, 1e-6, True, positions, inv_freq, caches[0], caches[1], slots)
    want = ref_qk.qk_norm_rope_cache(q, k, v, qw, kw, 1e-6, True, positions, inv_freq, caches[2], caches[3], slots)
    t = tol(dtype) if dtype == torch.float32 else {"atol": 3e-2, "rtol": 3e-2}
    torch.testing.assert_close(got, want, **t)
    torch.testing.assert_close(caches[0], caches[2], **t)
    torch.testing.assert_close(caches[1], caches[3], **t)
    assert not torch.equal(caches[0], torch.zeros_like(caches[0]))


def test_registered_as_the_qk_norm_rope_cache_op(monkeypatch):
    from anna_core.kernels import KernelRegistry, ProbeRequest
    from anna_core.plugins import make_plugin_manager

    monkeypatch.setenv("ANNA_TRITON_INTERPRET", "1")
    registry = KernelRegistry.from_plugins(make_plugin_manager({"anna_xpu_kernels"}))
    assert registry.get("qk_norm_rope_cache", ProbeRequest("cpu", "float32", {"head_dim": 256})) is qk_norm_rope_cache
    # without the head_dim fact (or on a dtype the kernels do not take) the op's reference serves it
    assert registry.get("qk_norm_rope_cache", ProbeRequest("cpu", "float32")) is ref_qk.qk_norm_rope_cache
    assert registry.get("qk_norm_rope_cache", ProbeRequest("cpu", "float64", {"head_dim": 64})) is ref_qk.qk_norm_rope_cache


def test_bad_arguments_are_clear_errors():
    q = torch.zeros(2, 4, 16)
    k = torch.zeros(2, 2, 16)
    cache = torch.zeros(2, BLOCK, 2, 16)
    with pytest.raises(ValueError, match="caches must be"):
        qk_norm_rope_cache(q, k, k, torch.zeros(16), torch.zeros(16), 1e-6, True, torch.zeros(2, dtype=torch.long),
                           torch.ones(4), torch.zeros(2, BLOCK, 3, 16), torch.zeros(2, BLOCK, 3, 16),
                           torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match="inv_freq"):
        qk_norm_rope_cache(q, k, k, torch.zeros(16), torch.zeros(16), 1e-6, True, torch.zeros(2, dtype=torch.long),
                           torch.ones(9), cache, cache.clone(), torch.zeros(2, dtype=torch.long))


def _mrope_case(dtype, dim, rotary_dim, section, seed=5):
    """q (a strided view, as the layer hands it), k, v, weights, ``[3, T]`` positions whose rows differ (text, then an
    image's t / h / w grid, then text), the rotary of Qwen3.5's interleaved M-RoPE, slots."""
    gen = torch.Generator().manual_seed(seed)
    T, h_q, h_kv = 9, 4, 2
    merged = torch.randn(T, 2 * h_q * dim + 2 * h_kv * dim, generator=gen).to(dtype)
    q = merged[:, : 2 * h_q * dim].view(T, h_q, 2 * dim)[..., :dim]
    k, v = merged[:, 2 * h_q * dim:].view(T, 2 * h_kv, dim).split(h_kv, dim=1)
    qw, kw = (0.2 * torch.randn(2, dim, generator=gen)).to(dtype)
    positions = torch.tensor([[0, 1, 2, 2, 2, 2, 4, 5, 3000],
                              [0, 1, 2, 2, 3, 3, 4, 5, 3000],
                              [0, 1, 2, 3, 2, 3, 4, 5, 3000]])
    rope = RotaryEmbedding(dim, rotary_dim, {"rope_theta": 1e7, "mrope_section": section, "mrope_interleaved": True})
    slots = torch.tensor([9, 2, 14, 0, 5, 6, 7, 1, 15])
    return q, k, v, qw, kw, positions, rope, slots


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("dim,rotary_dim,section", [(64, 16, [4, 2, 2]), (32, 32, [6, 5, 5])])
def test_mrope_rows_match_the_unfused_path(poison_outputs, dtype, dim, rotary_dim, section):
    """``[3, T]`` positions whose rows differ, with the config's interleaved sections: the kernel equals the unfused
    layer (q/k norms, ``RotaryEmbedding`` on the rows, ``reshape_and_cache``) and the op's reference."""
    q, k, v, qw, kw, positions, rope, slots = _mrope_case(dtype, dim, rotary_dim, section)
    inv_freq, axis = rope._tables(torch.device("cpu"))
    h_kv = k.shape[1]
    caches = [torch.full((4, BLOCK, h_kv, dim), float("nan"), dtype=dtype) for _ in range(6)]
    got = qk_norm_rope_cache(q, k, v, qw, kw, 1e-6, True, positions, inv_freq, caches[0], caches[1], slots, axis)

    want_q, want_k = rope(positions, ref_norms.rms_norm(q, qw, 1e-6, True), ref_norms.rms_norm(k, kw, 1e-6, True))
    ref_pa.reshape_and_cache(want_k, v, caches[2], caches[3], slots)
    ref = ref_qk.qk_norm_rope_cache(q, k, v, qw, kw, 1e-6, True, positions, inv_freq, caches[4], caches[5], slots,
                                    axis)
    torch.testing.assert_close(ref, want_q, rtol=0, atol=0)  # the reference is the unfused composition, bit for bit
    torch.testing.assert_close(caches[4], caches[2], rtol=0, atol=0, equal_nan=True)
    t = tol(dtype) if dtype == torch.float32 else {"atol": 3e-2, "rtol": 3e-2}
    torch.testing.assert_close(got, want_q, **t)
    torch.testing.assert_close(caches[0], caches[2], equal_nan=True, **t)
    torch.testing.assert_close(caches[1], caches[3], equal_nan=True, **t)
    # the rows matter: the first row alone (what 1-D positions would give) rotates the image tokens differently
    flat = qk_norm_rope_cache(q, k, v, qw, kw, 1e-6, True, positions[0].contiguous(), inv_freq,
                              caches[0].clone(), caches[1].clone(), slots)
    assert not torch.allclose(flat[3:6], got[3:6], **t) and torch.allclose(flat[:3], got[:3], **t)


def test_mrope_positions_from_a_strided_staging_buffer():
    """Positions sliced out of a wider ``[3, N]`` buffer (a prefill graph's staging) read their own rows."""
    q, k, v, qw, kw, positions, rope, slots = _mrope_case(torch.float32, 64, 16, [4, 2, 2])
    inv_freq, axis = rope._tables(torch.device("cpu"))
    staged = torch.zeros(3, 32, dtype=torch.int64)
    staged[:, :9] = positions
    caches = [torch.zeros(4, BLOCK, 2, 64) for _ in range(4)]
    got = qk_norm_rope_cache(q, k, v, qw, kw, 1e-6, True, staged[:, :9], inv_freq, caches[0], caches[1], slots, axis)
    want = qk_norm_rope_cache(q, k, v, qw, kw, 1e-6, True, positions, inv_freq, caches[2], caches[3], slots, axis)
    assert torch.equal(got, want) and torch.equal(caches[0], caches[2])


def test_mrope_arguments_are_checked():
    q, k, v, qw, kw, positions, rope, slots = _mrope_case(torch.float32, 64, 16, [4, 2, 2])
    inv_freq, axis = rope._tables(torch.device("cpu"))
    cache = torch.zeros(4, BLOCK, 2, 64)
    for fn in (qk_norm_rope_cache, ref_qk.qk_norm_rope_cache):
        with pytest.raises(ValueError, match="rows, T"):
            fn(q, k, v, qw, kw, 1e-6, True, positions[0], inv_freq, cache, cache.clone(), slots, axis)
        with pytest.raises(ValueError, match=r"positions must be \[T=9\]"):
            fn(q, k, v, qw, kw, 1e-6, True, positions, inv_freq, cache, cache.clone(), slots)
        with pytest.raises(ValueError, match="rope_axis must be integer"):
            fn(q, k, v, qw, kw, 1e-6, True, positions, inv_freq, cache, cache.clone(), slots, axis[:3])


def test_the_probe_takes_multi_row_positions(monkeypatch):
    from anna_core.kernels import KernelRegistry, ProbeRequest
    from anna_core.plugins import make_plugin_manager

    monkeypatch.setenv("ANNA_TRITON_INTERPRET", "1")
    registry = KernelRegistry.from_plugins(make_plugin_manager({"anna_xpu_kernels"}))
    request = ProbeRequest("cpu", "float32", {"head_dim": 256, "position_rows": 3})
    assert registry.get("qk_norm_rope_cache", request) is qk_norm_rope_cache
