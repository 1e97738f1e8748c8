"""Gated delta rule decode in Triton: one recurrent step per sequence, state slots updated in place.

Math (S. Yang, J. Kautz, A. Hatamizadeh, "Gated Delta Networks: Improving Mamba2 with Delta Rule",
2024), per sequence ``b``, value head ``h`` (key head ``h // (H_v // H_k)``) and the float32 state
``S = states[slots[b], h]`` of shape ``[K, V]``, exactly the step of the torch reference
(:func:`anna_core.kernels.reference.gated_delta_rule.gated_delta_rule_decode`)::

    S = exp(g) * S
    u = beta * (v - S^T k)
    S = S + k u^T
    o = S^T (scale * q)

One program owns (sequence, value head, V tile): it reads its ``[K, V_tile]`` slice of the state
into registers once, applies the step, writes ``o`` and the new slice back. The state slice is
touched by no other program, so the in-place update needs no synchronisation and no host sync.
"""

from __future__ import annotations

import torch
from anna_core.kernels.checks import check_gated_delta_rule, check_slots, require_dims

from anna_xpu_kernels._checks import require_float, require_same_device
from anna_xpu_kernels._triton import autotune, next_pow2, tl, triton

MAX_HEAD_DIM = 256
"""Largest key / value head dim held in registers; larger heads fall back to the torch reference."""

_CONFIGS = [triton.Config({"BLOCK_V": bv}, num_warps=w) for bv in (16, 32, 64, 128) for w in (1, 2, 4, 8)]


def _prune(configs, named_args, **kwargs):
    """Drop tiles wider than V and register tiles above 16K floats (spills)."""
    block_k = kwargs.get("BLOCK_K", named_args.get("BLOCK_K", 128))
    d_v = named_args["d_v"]
    kept = [c for c in configs if c.kwargs["BLOCK_V"] <= max(16, next_pow2(d_v)) and c.kwargs["BLOCK_V"] * block_k <= 16384]
    return kept or configs[:1]


@autotune(_CONFIGS, fixed=triton.Config({"BLOCK_V": 16}, num_warps=4), key=["d_k", "d_v", "BLOCK_K"],
          restore_value=["state_ptr"], prune_configs_by={"early_config_prune": _prune})
@triton.jit
def _gdr_decode_kernel(
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, state_ptr, slot_ptr, o_ptr,
    h_v, rep, d_k, d_v, scale,
    stride_qb, stride_qh, stride_kb, stride_kh, stride_vb, stride_vh,
    stride_gb, stride_gh, stride_betab, stride_betah,
    stride_ss, stride_sh, stride_sk, stride_sv, stride_ob, stride_oh,
    BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr,
):
    pid = tl.program_id(0)
    b = (pid // h_v).to(tl.int64)
    h = pid % h_v
    hk = h // rep
    kk = tl.arange(0, BLOCK_K)
    vv = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    k_ok = kk < d_k
    v_ok = vv < d_v
    slot = tl.load(slot_ptr + b).to(tl.int64)
    s_ptrs = state_ptr + slot * stride_ss + h * stride_sh + kk[:, None] * stride_sk + vv[None, :] * stride_sv
    s_ok = k_ok[:, None] & v_ok[None, :]
    state = tl.load(s_ptrs, mask=s_ok, other=0.0)  # [BLOCK_K, BLOCK_V] float32
    q = tl.load(q_ptr + b * stride_qb + hk * stride_qh + kk, mask=k_ok, other=0.0).to(tl.float32) * scale
    k = tl.load(k_ptr + b * stride_kb + hk * stride_kh + kk, mask=k_ok, other=0.0).to(tl.float32)
    v = tl.load(v_ptr + b * stride_vb + h * stride_vh + vv, mask=v_ok, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + b * stride_gb + h * stride_gh).to(tl.float32)
    beta = tl.load(beta_ptr + b * stride_betab + h * stride_betah).to(tl.float32)

    state = state * tl.exp(g)
    u = beta * (v - tl.sum(k[:, None] * state, axis=0))  # [BLOCK_V]
    state = state + k[:, None] * u[None, :]
    o = tl.sum(q[:, None] * state, axis=0)
    tl.store(o_ptr + b * stride_ob + h * stride_oh + vv, o.to(o_ptr.dtype.element_ty), mask=v_ok)
    tl.store(s_ptrs, state, mask=s_ok)


def _last_unit(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def gated_delta_rule_decode(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    states: torch.Tensor,
    slots: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """One gated-delta-rule step per sequence (signature of the reference ``gated_delta_rule_decode``).

    Args:
        q, k: ``[B, H_k, K]`` L2-normalised (rows may be strided views); v: ``[B, H_v, V]``;
            g: ``[B, H_v]`` float32 log decay; beta: ``[B, H_v]``.
        states: ``[S, H_v, K, V]`` float32 pool, updated in place at ``slots``.
        slots: ``[B]`` int64 distinct slot indices (not checked on the host: no device sync).
        scale: query scale.

    Returns:
        ``[B, H_v, V]`` in v's dtype.

    Raises:
        ValueError: inconsistent shapes, non-float32 states, unsupported dtype.
    """
    op = "gated_delta_rule_decode"
    require_dims(op, q=(q, 3), k=(k, 3), v=(v, 3), g=(g, 2), beta=(beta, 2))
    h_k, _ = check_gated_delta_rule(op, q, k, v, g, beta, states)
    batch, _, d_k = q.shape
    h_v, d_v = v.shape[1], v.shape[2]
    check_slots(op, slots, batch, states.shape[0], host_check=False)
    require_float(op, q=q, k=k, v=v)
    require_same_device(op, q=q, k=k, v=v, g=g, beta=beta, states=states, slots=slots)
    if d_k > MAX_HEAD_DIM or d_v > MAX_HEAD_DIM:
        from anna_core.kernels.reference.gated_delta_rule import (
            gated_delta_rule_decode as reference,
        )

        return reference(q, k, v, g, beta, states, slots, scale)
    out = torch.empty((batch, h_v, d_v), dtype=v.dtype, device=v.device)
    if batch == 0 or d_v == 0:
        return out
    q, k, v = _last_unit(q), _last_unit(k), _last_unit(v)

    def grid(meta):
        return (batch * h_v, triton.cdiv(d_v, meta["BLOCK_V"]))

    _gdr_decode_kernel[grid](
        q, k, v, g, beta, states, slots, out,
        h_v, h_v // h_k, d_k, d_v, float(scale),
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        g.stride(0), g.stride(1), beta.stride(0), beta.stride(1),
        states.stride(0), states.stride(1), states.stride(2), states.stride(3), out.stride(0), out.stride(1),
        BLOCK_K=next_pow2(d_k),
    )
    return out

