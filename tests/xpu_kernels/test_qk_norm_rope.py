"""Fused q/k RMSNorm + partial rotary + paged-cache write vs the torch reference ops (interpreter)."""

import pytest
import torch
from anna_core.kernels.reference import norms as ref_norms
from anna_core.kernels.reference import paged_attention as ref_pa
from anna_core.layers.rotary import RotaryEmbedding

from tests.xpu_kernels._interp import require_triton_interpreter, tol

require_triton_interpreter()

from anna_xpu_kernels import norms
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


def test_exposed_on_the_triton_rms_norm():
    assert norms.rms_norm.qk_norm_rope_cache is qk_norm_rope_cache


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
