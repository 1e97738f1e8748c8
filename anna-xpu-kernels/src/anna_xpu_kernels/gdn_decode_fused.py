"""One fused gated-DeltaNet decode step after the conv: L2 norm, decay / write strength, the recurrent
update of the slot state in place, and the SiLU-gated RMSNorm of the output, in one Triton launch.

Math (Yang, Kautz & Hatamizadeh, "Gated Delta Networks", 2024; Qwen3.5's gated DeltaNet layer), per
sequence ``b`` and value head ``h`` (key head ``hk = h // (H_v / H_k)``), exactly the composition of
the torch references the unfused layer calls, each intermediate rounded to the activation dtype
where the unfused layer rounds it::

    q = l2norm(q_raw[hk]),  k = l2norm(k_raw[hk])          # x * rsqrt(sum(x^2) + 1e-6)
    g = neg_a[h] * softplus(a[h] + dt_bias[h]),  beta = sigmoid(b[h])      (float32)
    S = exp(g) * S;  u = beta * (v - S^T k);  S = S + k u^T;  o = S^T (scale * q)
    y = o * rsqrt(mean(o^2) + eps) * w * silu(z[h])

One program owns one (sequence, value head) and holds the whole ``[K, V]`` float32 state slice in
registers (the gated norm needs every value of the head), so no other program touches it and the
in-place update needs no synchronisation and no host sync. Heads with ``K * V > 16384`` are not
fused (:func:`fusable` is False; callers use the separate ops).
"""

from __future__ import annotations

import torch
from anna_core.kernels.checks import check_slots, require

from anna_xpu_kernels._checks import require_float, require_same_device
from anna_xpu_kernels._triton import autotune, next_pow2, tl, triton

L2_EPS = tl.constexpr(1e-6)
MAX_TILE = 16384
_CONFIGS = [triton.Config({}, num_warps=w) for w in (2, 4, 8, 16)]


def fusable(d_k: int, d_v: int) -> bool:
    """Whether one program can hold a ``[d_k, d_v]`` state slice (padded to powers of two) in registers."""
    return next_pow2(d_k) * next_pow2(d_v) <= MAX_TILE


@autotune(_CONFIGS, fixed=triton.Config({}, num_warps=4), key=["d_k", "d_v", "BLOCK_K", "BLOCK_V"],
          restore_value=["state_ptr"])
@triton.jit
def _fused_gdn_decode_kernel(
    qkv_ptr, z_ptr, a_ptr, b_ptr, neg_a_ptr, dt_bias_ptr, w_ptr, state_ptr, slot_ptr, y_ptr,
    h_v, rep, d_k, d_v, key_dim, scale, eps,
    stride_qkv, stride_z, stride_a, stride_b, stride_ss, stride_sh, stride_sk, stride_sv, stride_y,
    BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr,
):
    pid = tl.program_id(0)
    bi = (pid // h_v).to(tl.int64)
    h = pid % h_v
    hk = h // rep
    kk = tl.arange(0, BLOCK_K)
    vv = tl.arange(0, BLOCK_V)
    k_ok = kk < d_k
    v_ok = vv < d_v
    row = qkv_ptr + bi * stride_qkv
    q = tl.load(row + hk * d_k + kk, mask=k_ok, other=0.0).to(tl.float32)
    k = tl.load(row + key_dim + hk * d_k + kk, mask=k_ok, other=0.0).to(tl.float32)
    v = tl.load(row + 2 * key_dim + h * d_v + vv, mask=v_ok, other=0.0).to(tl.float32)
    # L2 norms, rounded to the activation dtype like the unfused layer's l2_normalize
    q = (q * tl.rsqrt(tl.sum(q * q, axis=0) + L2_EPS)).to(qkv_ptr.dtype.element_ty).to(tl.float32)
    k = (k * tl.rsqrt(tl.sum(k * k, axis=0) + L2_EPS)).to(qkv_ptr.dtype.element_ty).to(tl.float32)
    # decay and write strength (float32; softplus with torch's threshold of 20)
    x = tl.load(a_ptr + bi * stride_a + h).to(tl.float32) + tl.load(dt_bias_ptr + h).to(tl.float32)
    softplus = tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(tl.minimum(x, 20.0))))
    g = tl.load(neg_a_ptr + h).to(tl.float32) * softplus
    beta = tl.sigmoid(tl.load(b_ptr + bi * stride_b + h).to(tl.float32))

    slot = tl.load(slot_ptr + bi).to(tl.int64)
    s_ptrs = state_ptr + slot * stride_ss + h * stride_sh + kk[:, None] * stride_sk + vv[None, :] * stride_sv
    s_ok = k_ok[:, None] & v_ok[None, :]
    state = tl.load(s_ptrs, mask=s_ok, other=0.0) * tl.exp(g)  # [BLOCK_K, BLOCK_V] float32
    u = beta * (v - tl.sum(k[:, None] * state, axis=0))
    state = state + k[:, None] * u[None, :]
    o = tl.sum((q * scale)[:, None] * state, axis=0)
    tl.store(s_ptrs, state, mask=s_ok)

    # gated RMSNorm over the head's values (o rounded first, as the unfused op returns it)
    o = o.to(y_ptr.dtype.element_ty).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(o * o, axis=0) / d_v + eps)
    w = tl.load(w_ptr + vv, mask=v_ok, other=0.0).to(tl.float32)
    z = tl.load(z_ptr + bi * stride_z + h * d_v + vv, mask=v_ok, other=0.0).to(tl.float32)
    y = o * rstd * w * (z * tl.sigmoid(z))
    tl.store(y_ptr + bi * stride_y + h * d_v + vv, y.to(y_ptr.dtype.element_ty), mask=v_ok)


def fused_gdn_decode(
    qkv: torch.Tensor,
    z: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    neg_a: torch.Tensor,
    dt_bias: torch.Tensor,
    norm_weight: torch.Tensor,
    norm_eps: float,
    states: torch.Tensor,
    slots: torch.Tensor,
    scale: float,
    num_k_heads: int,
) -> torch.Tensor:
    """Decode step of a gated DeltaNet layer from its conv output to the gated-norm output.

    Args:
        qkv: ``[B, 2*H_k*K + H_v*V]`` conv1d + SiLU output (q, k, v concatenated; rows may be strided).
        z: ``[B, H_v*V]`` output gate; a, b: ``[B, H_v]`` raw decay / write-strength projections
            (rows may be strided views of one merged projection; unit stride along the last dim).
        neg_a: ``[H_v]`` float32 ``-exp(A_log)``; dt_bias: ``[H_v]``; norm_weight: ``[V]``; norm_eps: RMSNorm eps.
        states: ``[S, H_v, K, V]`` float32 pool, updated in place at ``slots``.
        slots: ``[B]`` int64 distinct slot indices (not checked on the host: no device sync).
        scale: query scale; num_k_heads: ``H_k`` (divides ``H_v``).

    Returns:
        ``[B, H_v*V]`` in qkv's dtype: the gated-normalised output, ready for ``out_proj``.

    Raises:
        ValueError: inconsistent shapes, non-float32 states, a head too large to fuse (see :func:`fusable`).
    """
    op = "fused_gdn_decode"
    require(qkv.dim() == 2 and states.dim() == 4, op,
            f"qkv must be [B, C] and states [S, H_v, K, V], got {tuple(qkv.shape)}, {tuple(states.shape)}")
    batch = qkv.shape[0]
    _, h_v, d_k, d_v = states.shape
    require(num_k_heads > 0 and h_v % num_k_heads == 0, op, f"H_v={h_v} must be a multiple of H_k={num_k_heads}")
    key_dim = num_k_heads * d_k
    require(qkv.shape[1] == 2 * key_dim + h_v * d_v, op,
            f"qkv must have {2 * key_dim + h_v * d_v} columns, got {qkv.shape[1]}")
    require(tuple(z.shape) == (batch, h_v * d_v), op, f"z must be [{batch}, {h_v * d_v}], got {tuple(z.shape)}")
    require(tuple(a.shape) == (batch, h_v) and tuple(b.shape) == (batch, h_v), op,
            f"a and b must be [{batch}, {h_v}], got {tuple(a.shape)} and {tuple(b.shape)}")
    require(tuple(neg_a.shape) == (h_v,) and tuple(dt_bias.shape) == (h_v,) and tuple(norm_weight.shape) == (d_v,),
            op, "neg_a, dt_bias must be [H_v] and norm_weight [V]")
    require(states.dtype == torch.float32, op, f"states must be float32, got {states.dtype}")
    check_slots(op, slots, batch, states.shape[0], host_check=False)
    require(fusable(d_k, d_v), op, f"head dims K={d_k}, V={d_v} are too large to fuse")
    require_float(op, qkv=qkv)
    require_same_device(op, qkv=qkv, z=z, a=a, b=b, neg_a=neg_a, states=states, slots=slots)
    for name, t in (("qkv", qkv), ("z", z), ("a", a), ("b", b)):
        require(t.stride(-1) == 1, op, f"{name} needs unit stride along its last dim")
    y = torch.empty((batch, h_v * d_v), dtype=qkv.dtype, device=qkv.device)
    if batch == 0:
        return y
    _fused_gdn_decode_kernel[(batch * h_v,)](
        qkv, z, a, b, neg_a, dt_bias, norm_weight, states, slots, y,
        h_v, h_v // num_k_heads, d_k, d_v, key_dim, float(scale), float(norm_eps),
        qkv.stride(0), z.stride(0), a.stride(0), b.stride(0),
        states.stride(0), states.stride(1), states.stride(2), states.stride(3), y.stride(0),
        BLOCK_K=next_pow2(d_k), BLOCK_V=next_pow2(d_v),
    )
    return y
