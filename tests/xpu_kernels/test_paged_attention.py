"""Triton paged_attention (decode, prefill over a cached prefix, windows, split keys) vs the reference."""

import functools

import pytest
import torch
from anna_core.kernels.reference import paged_attention as ref

from tests.xpu_kernels._interp import require_triton_interpreter, tol

require_triton_interpreter()

from anna_xpu_kernels import paged_attention as pa
from anna_xpu_kernels import paged_attention_fused as paf

BLOCK_SIZE = 4


def _batch(dtype, q_lens, ctx_lens, h_q, h_kv, dim, seed):
    """Random K/V written through the paged cache at shuffled blocks; q as a strided view of a merged tensor."""
    gen = torch.Generator().manual_seed(seed)
    batch = len(q_lens)
    max_blocks = max(-(-n // BLOCK_SIZE) for n in ctx_lens) + 1  # one spare column of garbage ids
    n_blocks = batch * max_blocks + 2
    k_cache = torch.full((n_blocks, BLOCK_SIZE, h_kv, dim), float("nan"), dtype=dtype)  # unwritten slots are NaN
    v_cache = torch.full_like(k_cache, float("nan"))
    tables = torch.randperm(n_blocks, generator=gen)[: batch * max_blocks].view(batch, max_blocks).to(torch.int32)
    for i, n in enumerate(ctx_lens):
        pos = torch.arange(n)
        mapping = tables[i, pos // BLOCK_SIZE].long() * BLOCK_SIZE + pos % BLOCK_SIZE
        k = torch.randn(n, h_kv, dim, generator=gen).to(dtype)
        v = torch.randn(n, h_kv, dim, generator=gen).to(dtype)
        ref.reshape_and_cache(k, v, k_cache, v_cache, mapping)
    total = sum(q_lens)
    merged = torch.randn(total, h_q + 2 * h_kv, dim, generator=gen).to(dtype)
    q = merged[:, :h_q]
    cu = torch.tensor([0] + torch.tensor(q_lens).cumsum(0).tolist(), dtype=torch.int32)
    return q, k_cache, v_cache, cu, torch.tensor(ctx_lens, dtype=torch.int32), tables


def _check(dtype, q_lens, ctx_lens, *, h_q=4, h_kv=2, dim=32, window=None, splits=None, seed=0):
    q, k_cache, v_cache, cu, seq_lens, tables = _batch(dtype, q_lens, ctx_lens, h_q, h_kv, dim, seed)
    scale = dim ** -0.5
    got = pa.paged_attention_splits(q, k_cache, v_cache, cu, seq_lens, tables, scale, window, num_splits=splits)
    want = ref.paged_attention(q, k_cache, v_cache, cu, seq_lens, tables, scale, window)
    assert got.dtype == dtype and got.shape == q.shape
    torch.testing.assert_close(got, want, **tol(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("splits", [None, 3])
def test_decode_batch(poison_outputs, dtype, splits):
    _check(dtype, [1, 1, 1], [5, 17, 9], splits=splits)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_mixed_prefill_chunked_prefill_and_decode(poison_outputs, dtype):
    # sequence 0: fresh prefill; 1: decode; 2: 3 new tokens over a 7-token cached prefix.
    _check(dtype, [7, 1, 3], [7, 20, 10], seed=1)


def test_sliding_window(poison_outputs):
    _check(torch.float32, [7, 1, 3], [7, 20, 10], window=4, seed=2)


def test_sliding_window_with_splits(poison_outputs):
    _check(torch.float32, [1, 1], [30, 3], h_q=4, h_kv=4, window=5, splits=4, seed=3)


def test_odd_group_and_head_dim_with_splits(poison_outputs):
    # group of 3 query heads per KV head, head dim 24 (padded to 32 in registers), 19 queries = 2 row tiles.
    _check(torch.float32, [19], [30], h_q=6, h_kv=2, dim=24, splits=2, seed=4)


def test_public_op_uses_the_same_path(poison_outputs):
    q, k_cache, v_cache, cu, seq_lens, tables = _batch(torch.float32, [2, 1], [6, 9], 4, 2, 32, seed=5)
    got = pa.paged_attention(q, k_cache, v_cache, cu, seq_lens, tables, 0.2, None)
    torch.testing.assert_close(got, ref.paged_attention(q, k_cache, v_cache, cu, seq_lens, tables, 0.2, None),
                               **tol(torch.float32))


def test_paged_attention_bad_arguments_are_clear_errors():
    q, k_cache, v_cache, cu, seq_lens, tables = _batch(torch.float32, [1], [3], 4, 2, 32, seed=6)
    with pytest.raises(ValueError, match="multiple of H_kv"):
        pa.paged_attention(q[:, :3], k_cache, v_cache, cu, seq_lens, tables, 1.0, None)
    with pytest.raises(ValueError, match="sliding_window must be >= 1"):
        pa.paged_attention(q, k_cache, v_cache, cu, seq_lens, tables, 1.0, 0)
    with pytest.raises(ValueError, match="must have B=1 rows"):
        pa.paged_attention(q, k_cache, v_cache, cu, seq_lens.repeat(2), tables, 1.0, None)


def test_many_splits_follow_each_sequences_context(poison_outputs):
    # 64 splits over contexts of 3..40 keys: most splits of the short sequences are empty.
    _check(torch.float32, [1, 1, 1], [3, 40, 17], splits=64, seed=7)


def test_prefill_tiles_with_an_odd_number_of_splits(poison_outputs):
    _check(torch.bfloat16, [9, 1, 5], [9, 33, 12], splits=5, seed=8)


# Wide heads: Gemma 4's global layers have head_dim 512 (E2B 8 query heads over 1 KV head, E4B 8 over 2,
# 26B-A4B 16 over 2, 31B 32 over 4: groups of 8 and 4); 320 / 384 pad to 512 in registers.


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("splits", [None, 3])
def test_wide_head_decode_batch(poison_outputs, dtype, splits):
    _check(dtype, [1, 1, 1], [5, 23, 9], h_q=8, h_kv=1, dim=512, splits=splits, seed=10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize(("h_q", "h_kv"), [(2, 2), (4, 2), (16, 2)], ids=["group1", "group2", "group8"])
def test_wide_head_mixed_prefill_chunked_prefill_and_decode(poison_outputs, dtype, h_q, h_kv):
    _check(dtype, [7, 1, 3], [7, 20, 10], h_q=h_q, h_kv=h_kv, dim=512, seed=11)


@pytest.mark.parametrize("splits", [None, 4])
def test_wide_head_chunked_prefill_over_a_longer_context(poison_outputs, splits):
    # 40 new queries over a 50-token cached prefix, group 2: 16 queries per tile, so 3 row tiles.
    _check(torch.bfloat16, [40], [90], h_q=4, h_kv=2, dim=512, splits=splits, seed=12)


@pytest.mark.parametrize("splits", [None, 5])
def test_wide_head_sliding_window(poison_outputs, splits):
    _check(torch.float32, [7, 1, 3], [7, 30, 12], h_q=8, h_kv=2, dim=512, window=6, splits=splits, seed=13)


@pytest.mark.parametrize("dim", [320, 384])
def test_non_power_of_two_wide_heads(poison_outputs, dim):
    _check(torch.float32, [6, 1], [6, 19], h_q=4, h_kv=2, dim=dim, splits=2, seed=14)


def test_many_splits_with_wide_heads(poison_outputs):
    _check(torch.float32, [1, 1], [3, 60], h_q=8, h_kv=1, dim=512, splits=64, seed=15)


def test_wide_heads_run_the_triton_kernel_not_the_reference(poison_outputs, monkeypatch):
    def refuse(*args):
        raise RuntimeError("the torch reference was called")

    monkeypatch.setattr(pa, "_reference", refuse)
    q, k_cache, v_cache, cu, seq_lens, tables = _batch(torch.bfloat16, [3, 1], [5, 9], 8, 1, 512, seed=16)
    pa.paged_attention(q, k_cache, v_cache, cu, seq_lens, tables, 1.0, None)  # prefill + decode
    pa.paged_attention(q[3:], k_cache, v_cache, cu[:2], seq_lens[1:], tables[1:], 1.0, 4)  # decode only
    q, k_cache, v_cache, cu, seq_lens, tables = _batch(torch.float32, [1], [5], 2, 1, 1024, seed=17)
    with pytest.raises(RuntimeError, match="reference was called"):  # beyond MAX_HEAD_DIM: the reference
        pa.paged_attention(q, k_cache, v_cache, cu, seq_lens, tables, 1.0, None)


def test_heads_up_to_256_tune_over_the_original_configs():
    def kept(block_d):
        return [(c.kwargs["BLOCK_N"], c.num_warps, c.num_stages) for c in pa._prune(pa._CONFIGS, {}, BLOCK_D=block_d)]

    assert kept(32) == kept(128) == list(pa._NARROW)
    assert kept(256) == [(16, 4, 2), (32, 4, 2), (32, 8, 2), (64, 4, 2), (64, 8, 2), (64, 8, 3)]
    assert kept(512) == [(16, 4, 2), (32, 4, 2), (32, 8, 2), (16, 8, 2), (16, 4, 1), (32, 4, 1), (32, 8, 1)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", ["decode-splits", "mixed-window-proportional"])
def test_q_norm_rope_attention_matches_the_op_reference(poison_outputs, dtype, case):
    """``q_norm_rope_attention`` (a KV-shared layer: the query norm and rotary done as the attention kernel loads q)
    against its reference, ``q_norm_rope`` then ``paged_attention``: decodes split over the keys with default rotary
    (Gemma 4's sliding layers), and a prompt, a decode and a chunk under a window with proportional partial rotary
    (its global layers), zero-centred weights there."""
    from anna_core.kernels.reference import qk_norm_rope as ref_qk
    from anna_core.layers.rotary import RotaryEmbedding

    if case == "decode-splits":
        q_lens, ctx_lens, window, splits, dim, zc = [1, 1], [9, 23], None, 3, 32, False
        rope = {"rope_theta": 1e4}
    else:
        q_lens, ctx_lens, window, splits, dim, zc = [5, 1, 3], [5, 20, 10], 6, None, 64, True
        rope = {"rope_type": "proportional", "rope_theta": 1e6, "partial_rotary_factor": 0.25}
    q, k_cache, v_cache, cu, seq_lens, tables = _batch(dtype, q_lens, ctx_lens, 4, 2, dim, seed=dim)
    q = (4 * q.float()).to(dtype)  # rows far from unit RMS: the norm matters
    gen = torch.Generator().manual_seed(5)
    weight = (0.2 * torch.randn(dim, generator=gen) + (0.0 if zc else 1.0)).to(dtype)
    positions = torch.cat([torch.arange(c - n, c) for n, c in zip(q_lens, ctx_lens, strict=True)])
    inv_freq = RotaryEmbedding(dim, dim, rope)._inv_freq
    args = (k_cache, v_cache, cu, seq_lens, tables, dim ** -0.5, window)
    want = ref_qk.q_norm_rope_attention(q, weight, 1e-6, zc, positions, inv_freq, *args)
    # bfloat16: the interpreter rounds q toward zero, torch to nearest (one ulp), before the attention
    t = tol(dtype) if dtype == torch.float32 else {"atol": 3e-2, "rtol": 3e-2}
    for got in (pa.paged_attention_splits(q, *args, num_splits=splits, q_norm_rope=(weight, 1e-6, zc, positions,
                                                                                    inv_freq)),
                paf.q_norm_rope_attention(q, weight, 1e-6, zc, positions, inv_freq, *args)):
        assert got.dtype == dtype and got.shape == q.shape
        torch.testing.assert_close(got, want, **t)
    with pytest.raises(ValueError, match="weight must be"):
        paf.q_norm_rope_attention(q, weight[:-1], 1e-6, zc, positions, inv_freq, *args)


def test_q_norm_rope_attention_registered_and_switched_off_by_env(monkeypatch):
    from anna_core.kernels import KernelRegistry, ProbeRequest
    from anna_core.kernels.reference import qk_norm_rope as ref_qk
    from anna_core.plugins import make_plugin_manager

    monkeypatch.setenv("ANNA_TRITON_INTERPRET", "1")
    request = ProbeRequest("cpu", "bfloat16", {"head_dim": 512})
    registry = KernelRegistry.from_plugins(make_plugin_manager({"anna_xpu_kernels"}))
    assert registry.get_accelerated("q_norm_rope_attention", request) is None  # opt-in until measured on a GPU
    monkeypatch.setenv("ANNA_Q_NORM_ROPE_ATTENTION", "1")
    registry = KernelRegistry.from_plugins(make_plugin_manager({"anna_xpu_kernels"}))
    assert registry.get("q_norm_rope_attention", request) is paf.q_norm_rope_attention
    assert registry.get("q_norm_rope_attention", ProbeRequest("cpu", "bfloat16")) is ref_qk.q_norm_rope_attention
    monkeypatch.setenv("ANNA_Q_NORM_ROPE_ATTENTION", "0")  # A/B switch: q_norm_rope and the attention run apart
    registry = KernelRegistry.from_plugins(make_plugin_manager({"anna_xpu_kernels"}))
    assert registry.get_accelerated("q_norm_rope_attention", request) is None


@pytest.mark.parametrize("op", ["qkv_norm_rope_cache_attention", "qk_norm_rope_cache_attention"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", ["decode-splits", "decode-window-proportional-k-eq-v", "mixed"])
def test_own_kv_norm_rope_cache_attention_matches_the_op_reference(poison_outputs, dtype, case, op):
    """``qkv_norm_rope_cache_attention`` (Gemma 4's own-K/V layer: q/k/v norms, rotary, cache write and attention)
    and ``qk_norm_rope_cache_attention`` (the same without the value norm: Qwen3-TTS's code predictor) against their
    references (``qkv_norm_rope_cache`` / ``qk_norm_rope_cache``, then ``paged_attention``). Decodes run one kernel,
    which uses the new key and value from registers at the last position (its cache row is NaN before the call: never
    read) and writes them; the mixed batch (a prompt, a decode, a chunk) runs the two kernels."""
    from anna_core.kernels.reference import qk_norm_rope as ref_qk
    from anna_core.layers.rotary import RotaryEmbedding

    h_q, h_kv = 4, 2
    if case == "decode-splits":
        q_lens, ctx_lens, window, splits, dim, k_eq_v = [1, 1], [9, 23], None, 3, 32, False
        rope = {"rope_theta": 1e4}
    elif case == "decode-window-proportional-k-eq-v":
        q_lens, ctx_lens, window, splits, dim, k_eq_v = [1, 1, 1], [5, 20, 13], 6, None, 64, True
        rope = {"rope_type": "proportional", "rope_theta": 1e6, "partial_rotary_factor": 0.25}
    else:
        q_lens, ctx_lens, window, splits, dim, k_eq_v = [5, 1, 3], [5, 20, 10], None, None, 32, False
        rope = {"rope_theta": 1e4}
    q, k_cache, v_cache, cu, seq_lens, tables = _batch(dtype, q_lens, ctx_lens, h_q, h_kv, dim, seed=dim + len(q_lens))
    gen = torch.Generator().manual_seed(7)
    T = q.shape[0]
    q = (4 * q.float()).to(dtype)
    k = (3 * torch.randn(T, h_kv, dim, generator=gen)).to(dtype)
    v = k if k_eq_v else (3 * torch.randn(T, h_kv, dim, generator=gen)).to(dtype)
    qw, kw = (1 + 0.2 * torch.randn(2, dim, generator=gen)).to(dtype)
    positions = torch.cat([torch.arange(c - n, c) for n, c in zip(q_lens, ctx_lens, strict=True)])
    rows = tables[torch.repeat_interleave(torch.arange(len(q_lens)), torch.tensor(q_lens))]
    slots = rows.gather(1, (positions // BLOCK_SIZE)[:, None])[:, 0].long() * BLOCK_SIZE + positions % BLOCK_SIZE
    for cache in (k_cache, v_cache):  # the new tokens' rows are not written yet
        cache.view(-1, h_kv, dim)[slots] = float("nan")
    inv_freq = RotaryEmbedding(dim, dim, rope)._inv_freq
    caches = (k_cache.clone(), v_cache.clone())
    want = getattr(ref_qk, op)(q, k, v, qw, kw, 1e-6, False, positions, inv_freq, *caches, slots, cu, seq_lens,
                               tables, dim ** -0.5, window)
    if splits is None:
        got = getattr(paf, op)(q, k, v, qw, kw, 1e-6, False, positions, inv_freq, k_cache, v_cache, slots, cu,
                              seq_lens, tables, dim ** -0.5, window)
    else:
        got = pa.paged_attention_splits(q, k_cache, v_cache, cu, seq_lens, tables, dim ** -0.5, window,
                                        num_splits=splits, q_norm_rope=(qw, 1e-6, False, positions, inv_freq),
                                        kv_new=(k, v, kw, slots, op.startswith("qkv")))
    t = tol(dtype) if dtype == torch.float32 else {"atol": 3e-2, "rtol": 3e-2}
    assert got.dtype == dtype and got.shape == q.shape
    torch.testing.assert_close(got, want, **t)
    torch.testing.assert_close(k_cache, caches[0], equal_nan=True, **t)  # the new rows written, the rest unchanged
    torch.testing.assert_close(v_cache, caches[1], equal_nan=True, **t)
    assert not k_cache.view(-1, h_kv, dim)[slots].isnan().any()
    if op == "qk_norm_rope_cache_attention":  # the values written as they came (no value norm)
        torch.testing.assert_close(v_cache.view(-1, h_kv, dim)[slots], v, rtol=0, atol=0)


def test_own_kv_attention_takes_a_strided_query_and_names_its_op_in_errors():
    """A decode batch's query with a non-unit stride along D runs the fused kernel (made contiguous first, as
    ``paged_attention`` makes it) to the contiguous query's result, and a bad argument's error names the op called."""
    from anna_core.layers.rotary import RotaryEmbedding

    h_q, h_kv, dim, dtype = 4, 2, 32, torch.float32
    q, k_cache, v_cache, cu, seq_lens, tables = _batch(dtype, [1, 1], [9, 14], h_q, h_kv, dim, seed=3)
    gen = torch.Generator().manual_seed(5)
    k, v = torch.randn(2, 2, h_kv, dim, generator=gen)
    qw, kw = 1 + 0.2 * torch.randn(2, dim, generator=gen)
    positions = seq_lens.long() - 1
    slots = tables.gather(1, (positions // BLOCK_SIZE)[:, None])[:, 0].long() * BLOCK_SIZE + positions % BLOCK_SIZE
    inv_freq = RotaryEmbedding(dim, dim, {"rope_theta": 1e4})._inv_freq
    strided = torch.zeros(2, h_q, 2 * dim)[..., ::2]
    strided.copy_(q)
    runs = []
    for query in (q, strided):
        caches = (k_cache.clone(), v_cache.clone())
        runs.append(paf.qk_norm_rope_cache_attention(query, k, v, qw, kw, 1e-6, False, positions, inv_freq, *caches,
                                                    slots, cu, seq_lens, tables, dim ** -0.5, None))
    torch.testing.assert_close(runs[1], runs[0], rtol=0, atol=0)
    with pytest.raises(ValueError, match="^qk_norm_rope_cache_attention: sliding_window"):
        paf.qk_norm_rope_cache_attention(q, k, v, qw, kw, 1e-6, False, positions, inv_freq, k_cache, v_cache, slots,
                                        cu, seq_lens, tables, dim ** -0.5, 0)


def test_qkv_norm_rope_cache_attention_registered_and_switched_off_by_env(monkeypatch):
    from anna_core.kernels import KernelRegistry, ProbeRequest
    from anna_core.plugins import make_plugin_manager

    monkeypatch.setenv("ANNA_TRITON_INTERPRET", "1")
    request = ProbeRequest("cpu", "bfloat16", {"head_dim": 256})
    registry = KernelRegistry.from_plugins(make_plugin_manager({"anna_xpu_kernels"}))
    assert registry.get_accelerated("qkv_norm_rope_cache_attention", request) is None  # opt-in until measured
    monkeypatch.setenv("ANNA_QKV_NORM_ROPE_ATTENTION", "1")
    registry = KernelRegistry.from_plugins(make_plugin_manager({"anna_xpu_kernels"}))
    assert registry.get("qkv_norm_rope_cache_attention", request) is paf.qkv_norm_rope_cache_attention
    monkeypatch.setenv("ANNA_QKV_NORM_ROPE_ATTENTION", "0")  # A/B switch: qkv_norm_rope_cache and the attention apart
    registry = KernelRegistry.from_plugins(make_plugin_manager({"anna_xpu_kernels"}))
    assert registry.get_accelerated("qkv_norm_rope_cache_attention", request) is None
    monkeypatch.setenv("ANNA_QKV_NORM_ROPE_ATTENTION", "128")  # a head-dim limit: wider heads run apart
    registry = KernelRegistry.from_plugins(make_plugin_manager({"anna_xpu_kernels"}))
    assert registry.get_accelerated("qkv_norm_rope_cache_attention", request) is None
    narrow = ProbeRequest("cpu", "bfloat16", {"head_dim": 128})
    assert registry.get_accelerated("qkv_norm_rope_cache_attention", narrow) is paf.qkv_norm_rope_cache_attention


def test_qk_norm_rope_cache_attention_registered_and_switched_on_by_env(monkeypatch):
    from anna_core.kernels import KernelRegistry, ProbeRequest
    from anna_core.kernels.reference import qk_norm_rope as ref_qk
    from anna_core.plugins import make_plugin_manager

    monkeypatch.setenv("ANNA_TRITON_INTERPRET", "1")
    request = ProbeRequest("cpu", "bfloat16", {"head_dim": 128})
    for value, want in (("", None), ("0", None), ("1", paf.qk_norm_rope_cache_attention), ("64", None),
                        ("128", paf.qk_norm_rope_cache_attention)):
        monkeypatch.setenv("ANNA_QK_NORM_ROPE_ATTENTION", value)  # opt-in until measured; a number: a head-dim limit
        registry = KernelRegistry.from_plugins(make_plugin_manager({"anna_xpu_kernels"}))
        assert registry.get_accelerated("qk_norm_rope_cache_attention", request) is want, value
    # without the head dim the probe declines (the reference serves); Gemma 4's switch leaves this op alone
    assert registry.get("qk_norm_rope_cache_attention", ProbeRequest("cpu", "bfloat16")) \
        is ref_qk.qk_norm_rope_cache_attention
    monkeypatch.setenv("ANNA_QK_NORM_ROPE_ATTENTION", "0")
    monkeypatch.setenv("ANNA_QKV_NORM_ROPE_ATTENTION", "1")
    registry = KernelRegistry.from_plugins(make_plugin_manager({"anna_xpu_kernels"}))
    assert registry.get_accelerated("qk_norm_rope_cache_attention", request) is None


# The fused split merge (ANNA_ATTENTION_FUSED_MERGE): a decode batch's last split to arrive merges the partials inside
# the attention launch. Under the interpreter the programs run one after another, so the last program of each
# sequence and KV head merges; these tests check its math, that it leaves its counters at zero (graph replays) and
# that it launches one kernel, not two.


def _kernels(counter) -> dict[str, int]:
    """The Triton launches a :class:`LaunchCounter` saw (the poisoned allocations' fills and the counter pool's
    first allocation left out)."""
    return {name: n for name, n in counter.launches.items() if name.startswith("triton:")}


def _fused_check(dtype, ctx_lens, *, h_q, h_kv, dim, splits, window=None, seed=0):
    from tests.xpu_kernels._launches import LaunchCounter

    q, k_cache, v_cache, cu, seq_lens, tables = _batch(dtype, [1] * len(ctx_lens), ctx_lens, h_q, h_kv, dim, seed)
    args = (q, k_cache, v_cache, cu, seq_lens, tables, dim ** -0.5, window)
    want = ref.paged_attention(*args)
    with LaunchCounter() as fused:
        got = pa.paged_attention_splits(*args, num_splits=splits, fused_merge=splits)
    assert _kernels(fused) == {"triton:_paged_attention_kernel": 1}  # no merge kernel
    torch.testing.assert_close(got, want, **tol(dtype))
    assert not pa._COUNTERS.get(q.device, 1).any()  # every counter back at zero for the next launch
    again = pa.paged_attention_splits(*args, num_splits=splits, fused_merge=splits)  # a replay starts from zero
    torch.testing.assert_close(again, got, rtol=0, atol=0)
    with LaunchCounter() as apart:
        kernel = pa.paged_attention_splits(*args, num_splits=splits, fused_merge=0)
    assert _kernels(apart) == {"triton:_paged_attention_kernel": 1, "triton:_merge_splits_kernel": 1}
    torch.testing.assert_close(got, kernel, **tol(dtype))  # the merge kernel's result, up to summation order


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_fused_merge_decode_batch(poison_outputs, dtype):
    _fused_check(dtype, [5, 17, 9], h_q=4, h_kv=2, dim=32, splits=3, seed=20)


def test_fused_merge_with_many_empty_splits_and_a_window(poison_outputs):
    # 16 splits over 3..40 keys, a window of 7: most splits of the short sequences see no key
    _fused_check(torch.float32, [3, 40, 17], h_q=6, h_kv=2, dim=24, splits=16, window=7, seed=21)


def test_fused_merge_wide_heads_at_the_e2b_group(poison_outputs):
    # E2B's global layers: 8 query heads over one KV head of dim 512; 64 splits (the most the merge takes)
    _fused_check(torch.bfloat16, [60, 9], h_q=8, h_kv=1, dim=512, splits=64, seed=22)


def test_fused_merge_leaves_prefill_batches_to_the_merge_kernel(poison_outputs):
    from tests.xpu_kernels._launches import LaunchCounter

    q, k_cache, v_cache, cu, seq_lens, tables = _batch(torch.float32, [5, 1, 3], [5, 20, 10], 4, 2, 32, seed=23)
    args = (q, k_cache, v_cache, cu, seq_lens, tables, 32 ** -0.5, None)
    with LaunchCounter() as c:
        got = pa.paged_attention_splits(*args, num_splits=3, fused_merge=16)
    assert c.launches["triton:_merge_splits_kernel"] == 1
    torch.testing.assert_close(got, ref.paged_attention(*args), **tol(torch.float32))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_fused_merge_with_the_fused_qkv_pre_processing(poison_outputs, dtype):
    """Gemma 4's own-K/V decode at batch 1 in one launch: q/k/v norms, rotary, cache write, attention and the merge."""
    from anna_core.kernels.reference import qk_norm_rope as ref_qk
    from anna_core.layers.rotary import RotaryEmbedding

    from tests.xpu_kernels._launches import LaunchCounter

    h_q, h_kv, dim, ctx = 8, 1, 64, 37
    q, k_cache, v_cache, cu, seq_lens, tables = _batch(dtype, [1], [ctx], h_q, h_kv, dim, seed=24)
    gen = torch.Generator().manual_seed(8)
    k = (3 * torch.randn(1, h_kv, dim, generator=gen)).to(dtype)
    v = (3 * torch.randn(1, h_kv, dim, generator=gen)).to(dtype)
    qw, kw = (1 + 0.2 * torch.randn(2, dim, generator=gen)).to(dtype)
    positions = torch.tensor([ctx - 1])
    slots = tables[0, (ctx - 1) // BLOCK_SIZE].long().view(1) * BLOCK_SIZE + (ctx - 1) % BLOCK_SIZE
    for cache in (k_cache, v_cache):
        cache.view(-1, h_kv, dim)[slots] = float("nan")
    inv_freq = RotaryEmbedding(dim, dim, {"rope_theta": 1e4})._inv_freq
    caches = (k_cache.clone(), v_cache.clone())
    want = ref_qk.qkv_norm_rope_cache_attention(q, k, v, qw, kw, 1e-6, False, positions, inv_freq, *caches, slots, cu,
                                                seq_lens, tables, dim ** -0.5, 16)
    with LaunchCounter() as c:
        got = pa.paged_attention_splits(q, k_cache, v_cache, cu, seq_lens, tables, dim ** -0.5, 16, num_splits=4,
                                        q_norm_rope=(qw, 1e-6, False, positions, inv_freq),
                                        kv_new=(k, v, kw, slots, True), fused_merge=4)
    assert _kernels(c) == {"triton:_paged_attention_kernel": 1}
    t = tol(dtype) if dtype == torch.float32 else {"atol": 3e-2, "rtol": 3e-2}
    torch.testing.assert_close(got, want, **t)
    torch.testing.assert_close(k_cache, caches[0], equal_nan=True, **t)


def test_fused_merge_only_where_its_splits_stay_short(poison_outputs):
    """A cap of 2 splits over a 200-key table (no window) would leave 100 keys per split: the merge kernel runs; a
    window of 96 keys (48 per split) fuses."""
    from tests.xpu_kernels._launches import LaunchCounter

    q, k_cache, v_cache, cu, seq_lens, tables = _batch(torch.float32, [1], [199], 4, 2, 32, seed=26)
    assert tables.shape[1] * BLOCK_SIZE == 204
    for window, want in ((None, 2), (96, 1)):
        args = (q, k_cache, v_cache, cu, seq_lens, tables, 32 ** -0.5, window)
        with LaunchCounter() as c:
            got = pa.paged_attention_splits(*args, num_splits=2, fused_merge=2)
        assert sum(_kernels(c).values()) == want, window
        torch.testing.assert_close(got, ref.paged_attention(*args), **tol(torch.float32))


def test_fused_merge_switch_and_split_cap(monkeypatch):
    from anna_xpu_kernels import _env, attention_plan

    for value, want in (("", 0), ("0", 0), ("off", 0), ("1", _env.FUSED_MERGE_SPLITS), ("on", 16), ("32", 32),
                        ("500", 64), ("many", 0)):
        monkeypatch.setenv("ANNA_ATTENTION_FUSED_MERGE", value)
        assert _env.attention_fused_merge_splits() == want, value
    # the cap bounds the GPU's choice (here 64 splits), never a forced count
    monkeypatch.setattr(attention_plan, "default_num_splits", lambda device, programs, max_keys: 64)
    cu = torch.arange(2, dtype=torch.int32)
    plan = functools.partial(attention_plan.plan_attention, cu, 1, 1, 8, 1, 256, 4096, 64)
    assert plan(None).splits == 64 and plan(None, split_cap=16).splits == 16 and plan(32, split_cap=16).splits == 32


def test_fused_merge_follows_the_env_switch(poison_outputs, monkeypatch):
    from tests.xpu_kernels._launches import LaunchCounter

    q, k_cache, v_cache, cu, seq_lens, tables = _batch(torch.float32, [1, 1], [9, 23], 4, 2, 32, seed=25)
    args = (q, k_cache, v_cache, cu, seq_lens, tables, 32 ** -0.5, None)
    counts = {}
    for value in ("0", "8"):
        monkeypatch.setenv("ANNA_ATTENTION_FUSED_MERGE", value)
        with LaunchCounter() as c:
            pa.paged_attention_splits(*args, num_splits=3)
        counts[value] = sum(_kernels(c).values())
    assert counts == {"0": 2, "8": 1}
