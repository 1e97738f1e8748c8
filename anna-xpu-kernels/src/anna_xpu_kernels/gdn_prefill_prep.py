"""The gated DeltaNet prefill inputs in one Triton launch: q / k L2 norms, v, the decay ``g`` and the
write strength ``beta``, from the conv output and the ``a`` / ``b`` projections.

Math (Yang et al., "Gated Delta Networks: Improving Mamba2 with Delta Rule", 2024; the Qwen3.5
GatedDeltaNet of HF transformers), per token, the float32 results rounded once to the activation
dtype of ``qkv`` (exactly the unfused torch path of the layer, ``l2_normalize`` etc.)::

    q_h = round(x_h * rsqrt(sum(x_h^2) + 1e-6))     x_h: q head h of the conv output, float32
    k_h = round(x_h * rsqrt(sum(x_h^2) + 1e-6))     likewise for k head h
    v   = the v columns, copied                      [H_v, V]
    g   = neg_a * softplus(a + dt_bias)              float32; softplus(x) = x if x > 20 else log1p(exp(x))
    beta = round(sigmoid(b))

``log1p(u)`` is evaluated as ``u`` where ``1 + u`` rounds to 1 and as ``log(1 + u) * u / ((1 + u) - 1)``
otherwise (Goldberg, "What every computer scientist should know about floating-point arithmetic",
1991, Theorem 4): accurate to a few float32 ulps without libdevice, which Triton's interpreter lacks.

Grid: ``(ceil(T / BLOCK_T), H_k)``. Program ``(i, hk)`` takes ``BLOCK_T`` tokens and the group of key
head ``hk``: q head ``hk``, k head ``hk`` (``[BLOCK_T, BLOCK_K]`` tiles, normalised in registers),
the ``H_v / H_k`` value heads that share that key head (one ``[BLOCK_T, BLOCK_V]`` tile each) and
their ``g`` / ``beta`` (``[BLOCK_T, BLOCK_R]``). Every program moves the same amount of data, every
element is read once and written once, and the grid has enough programs at prefill sizes (Qwen3.5-9B,
2048 tokens: 128 x 16) without any per-program loop over all heads. ``K`` and ``V`` are padded to
powers of two with masks; ``BLOCK_T * max(BLOCK_K, BLOCK_V) <= 2048`` values per tile.

PDL: the kernel starts with :func:`anna_xpu_kernels.pdl.enter` (it has nothing to prefetch), as the
norm kernels do.
"""

from __future__ import annotations

import torch
from anna_core.kernels.checks import require, require_dims

from anna_xpu_kernels import pdl
from anna_xpu_kernels._checks import require_float, require_same_device
from anna_xpu_kernels._triton import autotune, next_pow2, tl, triton

L2_EPS = tl.constexpr(1e-6)
"""Added to the sum of squares of each q / k head (as ``anna_qwen35.gated_deltanet.L2_EPS``)."""
SOFTPLUS_THRESHOLD = tl.constexpr(20.0)
"""torch's ``F.softplus`` default: above it softplus(x) = x."""
MAX_TILE = 2048
"""Most values of one ``[BLOCK_T, BLOCK_K | BLOCK_V]`` tile."""
MAX_BLOCK_T = 16
"""Most tokens of one program."""

_CONFIGS = [triton.Config({}, num_warps=w) for w in (1, 2, 4, 8)]


@triton.jit
def _l2_normalize_head(src, dst, mask):
    """Load the ``[BLOCK_T, BLOCK_K]`` tile at ``src``, normalise each row in float32, store it rounded at ``dst``."""
    x = tl.load(src, mask=mask, other=0.0).to(tl.float32)
    y = x * tl.rsqrt(tl.sum(x * x, axis=1) + L2_EPS)[:, None]
    tl.store(dst, y.to(dst.dtype.element_ty), mask=mask)


@triton.jit
def _softplus(x):
    """torch's ``softplus(x)`` (beta 1, threshold 20) in float32, with an accurate ``log1p``."""
    u = tl.exp(tl.where(x > SOFTPLUS_THRESHOLD, SOFTPLUS_THRESHOLD, x))  # a NaN stays NaN (tl.minimum drops it)
    w = 1.0 + u
    exact = w == 1.0
    log1p = tl.where(exact, u, tl.log(w) * (u / tl.where(exact, 1.0, w - 1.0)))
    return tl.where(x > SOFTPLUS_THRESHOLD, x, log1p)


@autotune(_CONFIGS, fixed=triton.Config({}, num_warps=4), key=["BLOCK_T", "BLOCK_K", "BLOCK_V", "BLOCK_R"])
@triton.jit(do_not_specialize=['n_tokens'])
def _gdn_prefill_prep_kernel(
    qkv_ptr, a_ptr, b_raw_ptr, neg_a_ptr, dt_bias_ptr, q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr,
    n_tokens, h_k, rep, d_k, d_v, stride_x, stride_a, stride_b,
    BLOCK_T: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_R: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    pdl.enter(USE_PDL)
    hk = tl.program_id(1)
    tt = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    t_ok = tt < n_tokens
    t64 = tt.to(tl.int64)[:, None]
    key_dim = h_k * d_k
    h_v = h_k * rep
    x_row = qkv_ptr + t64 * stride_x  # [BLOCK_T, 1]

    # q and k head hk: columns hk*K.. of the q block and of the k block (outputs [T, H_k*K])
    kk = tl.arange(0, BLOCK_K)
    col_k = hk * d_k + kk[None, :]
    k_mask = t_ok[:, None] & (kk < d_k)[None, :]
    _l2_normalize_head(x_row + col_k, q_ptr + t64 * key_dim + col_k, k_mask)
    _l2_normalize_head(x_row + key_dim + col_k, k_ptr + t64 * key_dim + col_k, k_mask)

    # the value heads of this group, copied (output [T, H_v*V])
    vv = tl.arange(0, BLOCK_V)
    v_mask = t_ok[:, None] & (vv < d_v)[None, :]
    for j in range(rep):
        col_v = (hk * rep + j) * d_v + vv[None, :]
        x = tl.load(x_row + 2 * key_dim + col_v, mask=v_mask, other=0.0)
        tl.store(v_ptr + t64 * (h_v * d_v) + col_v, x, mask=v_mask)

    # g and beta of the group's value heads (outputs [T, H_v])
    rr = tl.arange(0, BLOCK_R)
    h = hk * rep + rr
    r_mask = t_ok[:, None] & (rr < rep)[None, :]
    xa = tl.load(a_ptr + t64 * stride_a + h[None, :], mask=r_mask, other=0.0).to(tl.float32)
    xa = xa + tl.load(dt_bias_ptr + h, mask=rr < rep, other=0.0).to(tl.float32)[None, :]
    neg_a = tl.load(neg_a_ptr + h, mask=rr < rep, other=0.0).to(tl.float32)[None, :]
    tl.store(g_ptr + t64 * h_v + h[None, :], neg_a * _softplus(xa), mask=r_mask)
    xb = tl.load(b_raw_ptr + t64 * stride_b + h[None, :], mask=r_mask, other=0.0).to(tl.float32)
    tl.store(beta_ptr + t64 * h_v + h[None, :], tl.sigmoid(xb).to(beta_ptr.dtype.element_ty), mask=r_mask)


def block_tokens(d_k: int, d_v: int) -> int:
    """``BLOCK_T``: tokens per program, so one ``[BLOCK_T, max(BLOCK_K, BLOCK_V)]`` tile holds at most
    :data:`MAX_TILE` values (at most :data:`MAX_BLOCK_T` tokens; 16 for 128-dim heads)."""
    return max(1, min(MAX_BLOCK_T, MAX_TILE // max(next_pow2(d_k), next_pow2(d_v))))


def _check(op: str, qkv, a, b, neg_a, dt_bias, num_k_heads: int, head_k_dim: int, head_v_dim: int) -> int:
    """Validate the arguments of :func:`gdn_prefill_prep`; returns ``H_v``."""
    require_dims(op, qkv=(qkv, 2), a=(a, 2), b=(b, 2), neg_a=(neg_a, 1), dt_bias=(dt_bias, 1))
    require(num_k_heads > 0 and head_k_dim > 0 and head_v_dim > 0, op,
            f"num_k_heads, head_k_dim and head_v_dim must be positive, got {num_k_heads}, {head_k_dim}, {head_v_dim}")
    n_tokens, h_v = a.shape
    require(qkv.shape[0] == n_tokens and tuple(b.shape) == (n_tokens, h_v), op,
            f"a and b must be [T={qkv.shape[0]}, H_v], got {tuple(a.shape)} and {tuple(b.shape)}")
    require(h_v % num_k_heads == 0 and h_v > 0, op, f"H_v={h_v} must be a positive multiple of H_k={num_k_heads}")
    channels = 2 * num_k_heads * head_k_dim + h_v * head_v_dim
    require(qkv.shape[1] == channels, op,
            f"qkv must have 2*H_k*K + H_v*V = {channels} columns (H_k={num_k_heads}, K={head_k_dim}, H_v={h_v}, "
            f"V={head_v_dim}), got {qkv.shape[1]}")
    require(tuple(neg_a.shape) == (h_v,) and tuple(dt_bias.shape) == (h_v,), op,
            f"neg_a and dt_bias must be [H_v={h_v}], got {tuple(neg_a.shape)} and {tuple(dt_bias.shape)}")
    require_float(op, qkv=qkv, dt_bias=dt_bias)
    require(a.dtype == qkv.dtype and b.dtype == qkv.dtype, op,
            f"a and b must have qkv's dtype {qkv.dtype}, got {a.dtype} and {b.dtype}")
    require(neg_a.dtype == torch.float32, op, f"neg_a must be float32, got {neg_a.dtype}")
    require_same_device(op, qkv=qkv, a=a, b=b, neg_a=neg_a, dt_bias=dt_bias)
    for name, t in (("qkv", qkv), ("a", a), ("b", b)):
        require(t.stride(-1) == 1 or t.shape[-1] == 1, op,
                f"{name} needs unit stride along its last dim, got strides {t.stride()}")
    return h_v


def gdn_prefill_prep(
    qkv: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    neg_a: torch.Tensor,
    dt_bias: torch.Tensor,
    num_k_heads: int,
    head_k_dim: int,
    head_v_dim: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The inputs of ``gated_delta_rule_prefill`` from a gated DeltaNet layer's conv output, one launch.

    Args:
        qkv: ``[T, C]`` float32 / float16 / bfloat16 conv output, ``C = 2*H_k*K + H_v*V`` (q heads,
            then k heads, then v heads); unit stride along C, any row stride.
        a, b: ``[T, H_v]`` raw decay / write-strength projections in qkv's dtype; unit stride along
            H_v, any row stride (e.g. column slices of one merged projection).
        neg_a: ``[H_v]`` float32 ``-exp(A_log)``; dt_bias: ``[H_v]`` float32 / float16 / bfloat16.
        num_k_heads: ``H_k`` (divides ``H_v = a.shape[1]``); head_k_dim: ``K``; head_v_dim: ``V``.

    Returns:
        ``(q, k, v, g, beta)``, fresh contiguous tensors: q, k ``[T, H_k, K]`` in qkv's dtype, each head
        ``x * rsqrt(sum(x^2) + 1e-6)`` computed in float32; v ``[T, H_v, V]`` (a copy); g ``[T, H_v]``
        float32 ``neg_a * softplus(a + dt_bias)``; beta ``[T, H_v]`` in qkv's dtype ``sigmoid(b)``.

    Raises:
        ValueError: a tensor of the wrong rank or shape (C disagreeing with the head counts and dims,
            ``H_v`` not a multiple of ``H_k``), a non-positive head count or dim, an unsupported or
            mismatched dtype (a, b not qkv's dtype, neg_a not float32), tensors on different devices,
            or a non-unit stride along the last dim of qkv, a or b.
    """
    op = "gdn_prefill_prep"
    h_v = _check(op, qkv, a, b, neg_a, dt_bias, num_k_heads, head_k_dim, head_v_dim)
    n_tokens = qkv.shape[0]
    dev, act = qkv.device, qkv.dtype
    q = torch.empty((n_tokens, num_k_heads, head_k_dim), dtype=act, device=dev)
    k = torch.empty((n_tokens, num_k_heads, head_k_dim), dtype=act, device=dev)
    v = torch.empty((n_tokens, h_v, head_v_dim), dtype=act, device=dev)
    g = torch.empty((n_tokens, h_v), dtype=torch.float32, device=dev)
    beta = torch.empty((n_tokens, h_v), dtype=act, device=dev)
    if n_tokens == 0:
        return q, k, v, g, beta
    rep = h_v // num_k_heads
    block_t = block_tokens(head_k_dim, head_v_dim)
    _gdn_prefill_prep_kernel[(triton.cdiv(n_tokens, block_t), num_k_heads)](
        qkv, a, b, neg_a.contiguous(), dt_bias.contiguous(), q, k, v, g, beta,
        n_tokens, num_k_heads, rep, head_k_dim, head_v_dim, qkv.stride(0), a.stride(0), b.stride(0),
        BLOCK_T=block_t, BLOCK_K=next_pow2(head_k_dim), BLOCK_V=next_pow2(head_v_dim), BLOCK_R=next_pow2(rep),
        **pdl.launch_options(q),
    )
    return q, k, v, g, beta
