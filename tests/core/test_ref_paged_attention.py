"""Reference paged attention and reshape_and_cache vs dense causal attention on contiguous K/V."""

import pytest
import torch
from anna_core.kernels.reference.paged_attention import paged_attention, reshape_and_cache

BLOCK, N_BLOCKS, D = 4, 40, 8


def dense(q, k, v, scale, window):
    """q ``[Lq, Hq, D]`` at the last Lq positions of k/v ``[L, Hkv, D]``; float64 softmax attention."""
    n_q, n_k = q.shape[0], k.shape[0]
    rep = q.shape[1] // k.shape[1]
    k, v = k.double().repeat_interleave(rep, 1), v.double().repeat_interleave(rep, 1)
    scores = torch.einsum("qhd,khd->hqk", q.double(), k) * scale
    q_pos = torch.arange(n_k - n_q, n_k)[:, None]
    k_pos = torch.arange(n_k)[None]
    allowed = k_pos <= q_pos
    if window is not None:
        allowed &= k_pos > q_pos - window
    probs = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
    return torch.einsum("hqk,khd->qhd", probs, v)


def build_cache(ctx_lens, h_kv, dtype, seed):
    """Random K/V per sequence written through reshape_and_cache into randomly permuted blocks."""
    gen = torch.Generator().manual_seed(seed)
    k_cache = torch.full((N_BLOCKS, BLOCK, h_kv, D), float("nan"), dtype=dtype)  # unwritten slots poison results
    v_cache = k_cache.clone()
    perm = torch.randperm(N_BLOCKS, generator=gen).tolist()
    max_blocks = max(-(-n // BLOCK) for n in ctx_lens) + 1
    tables = torch.zeros(len(ctx_lens), max_blocks, dtype=torch.int32)
    kv = []
    for i, n in enumerate(ctx_lens):
        blocks = [perm.pop() for _ in range(-(-n // BLOCK))]
        tables[i, : len(blocks)] = torch.tensor(blocks, dtype=torch.int32)
        k = torch.randn(n, h_kv, D, generator=gen).to(dtype)
        v = torch.randn(n, h_kv, D, generator=gen).to(dtype)
        pos = torch.arange(n)
        slot_mapping = tables[i, pos // BLOCK].long() * BLOCK + pos % BLOCK
        reshape_and_cache(k, v, k_cache, v_cache, slot_mapping)
        kv.append((k, v))
    return k_cache, v_cache, tables, kv


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("h_q,h_kv", [(2, 2), (4, 2), (6, 1)])
@pytest.mark.parametrize("window", [None, 5])
def test_mixed_batch_matches_dense(dtype, h_q, h_kv, window):
    # prefill from empty, chunked prefill over a cached prefix, decodes (different contexts), a 1-token prompt
    ctx_lens = [9, 14, 7, 1, 12, 3]
    q_lens = [9, 5, 1, 1, 1, 2]
    k_cache, v_cache, tables, kv = build_cache(ctx_lens, h_kv, dtype, seed=h_q)
    gen = torch.Generator().manual_seed(99)
    q = torch.randn(sum(q_lens), h_q, D, generator=gen).to(dtype)
    cu_q = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    seq_lens = torch.tensor(ctx_lens, dtype=torch.int32)
    scale = D**-0.5
    out = paged_attention(q, k_cache, v_cache, cu_q, seq_lens, tables, scale, window)
    assert out.shape == q.shape and out.dtype == dtype
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    offs = cu_q.tolist()
    for i, (k, v) in enumerate(kv):
        ref = dense(q[offs[i] : offs[i + 1]], k, v, scale, window)
        torch.testing.assert_close(out[offs[i] : offs[i + 1]].double(), ref, atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("h_q,h_kv", [(2, 2), (6, 1)])
@pytest.mark.parametrize("n_ctx", [1, 4, 10])
def test_single_sequence_decode_matches_dense(dtype, h_q, h_kv, n_ctx):
    # batch-1 decode takes its own path (no mask); the NaN-filled slots past n_ctx must stay unread
    k_cache, v_cache, tables, [(k, v)] = build_cache([n_ctx], h_kv, dtype, seed=n_ctx)
    q = torch.randn(1, h_q, D, generator=torch.Generator().manual_seed(7)).to(dtype)
    cu_q = torch.tensor([0, 1], dtype=torch.int32)
    out = paged_attention(q, k_cache, v_cache, cu_q, torch.tensor([n_ctx], dtype=torch.int32), tables, 0.4, None)
    assert out.shape == q.shape and out.dtype == dtype
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out.double(), dense(q, k, v, 0.4, None), atol=tol, rtol=tol)


def test_chunked_prefill_equals_full_prefill():
    n, h = 11, 2
    k_cache, v_cache, tables, _ = build_cache([n], h, torch.float32, seed=3)
    q = torch.randn(n, h, D)
    seq_lens = torch.tensor([n], dtype=torch.int32)
    full = paged_attention(q, k_cache, v_cache, torch.tensor([0, n], dtype=torch.int32), seq_lens, tables, 0.3, None)
    parts = []
    for a, b in ((0, 4), (4, 10), (10, 11)):
        cu_q = torch.tensor([0, b - a], dtype=torch.int32)
        parts.append(paged_attention(q[a:b], k_cache, v_cache, cu_q, torch.tensor([b], dtype=torch.int32), tables,
                                     0.3, None))
    torch.testing.assert_close(torch.cat(parts), full, atol=1e-6, rtol=1e-5)


def test_reshape_and_cache_places_tokens():
    k_cache = torch.zeros(3, 2, 1, 2)
    v_cache = torch.zeros(3, 2, 1, 2)
    k = torch.arange(1.0, 7.0).view(3, 1, 2)
    reshape_and_cache(k, -k, k_cache, v_cache, torch.tensor([5, 0, 2]))
    expected = torch.zeros(6, 1, 2)
    expected[[5, 0, 2]] = k
    assert torch.equal(k_cache.view(6, 1, 2), expected)
    assert torch.equal(v_cache.view(6, 1, 2), -expected)


def test_bad_inputs_raise():
    k_cache, v_cache, tables, _ = build_cache([5], 2, torch.float32, seed=0)
    q = torch.randn(6, 4, D)
    with pytest.raises(ValueError, match="queries but context length"):
        paged_attention(q, k_cache, v_cache, torch.tensor([0, 6], dtype=torch.int32),
                        torch.tensor([5], dtype=torch.int32), tables, 1.0, None)
    with pytest.raises(ValueError, match="multiple of H_kv"):
        paged_attention(torch.randn(5, 3, D), k_cache, v_cache, torch.tensor([0, 5], dtype=torch.int32),
                        torch.tensor([5], dtype=torch.int32), tables, 1.0, None)
    with pytest.raises(ValueError, match="blocks"):
        paged_attention(q, k_cache, v_cache, torch.tensor([0, 6], dtype=torch.int32),
                        torch.tensor([60], dtype=torch.int32), tables, 1.0, None)
