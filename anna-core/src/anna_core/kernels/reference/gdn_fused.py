"""A gated DeltaNet layer's token mixing as single ops (Yang, Kautz & Hatamizadeh, "Gated Delta
Networks", 2024; Qwen3.5's linear-attention layer), composed of the unfused references.

Both ops start from the layer's raw projections: ``qkv`` (q, k, v heads concatenated: ``C = 2*H_k*K
+ H_v*V`` channels), the raw decay input ``a`` and write-strength input ``b`` (``[T, H_v]``). The
layer's preparation between the conv and the rule is::

    q, k = l2norm(q heads), l2norm(k heads)      # x * rsqrt(sum(x^2) + 1e-6), float32, rounded
    g    = neg_a * softplus(a + dt_bias)         # float32 log decay, <= 0
    beta = sigmoid(b)                            # float32

``fused_gdn_decode`` also runs the conv update before it and the gated RMSNorm after the rule;
``fused_gdn_prefill`` starts after the conv (the layer's prefill conv also feeds state snapshots) and
ends with the rule's output. Kernel plugins fuse these chains (one launch per layer at decode).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from anna_core.kernels.checks import check_recurrent_states, num_sequences, require, require_dims
from anna_core.kernels.reference.conv1d import causal_conv1d_update
from anna_core.kernels.reference.gated_delta_rule import gated_delta_rule_decode, gated_delta_rule_prefill
from anna_core.kernels.reference.norms import gated_rms_norm

L2_EPS = 1e-6
"""Added to the sum of squares of the q / k L2 norms (as FLA's and HF's ``l2norm``)."""


def _check_gates(op: str, rows: int, h_v: int, a: torch.Tensor, b: torch.Tensor, neg_a: torch.Tensor,
                 dt_bias: torch.Tensor) -> None:
    require(tuple(a.shape) == (rows, h_v) and tuple(b.shape) == (rows, h_v), op,
            f"a and b must be [{rows}, {h_v}], got {tuple(a.shape)} and {tuple(b.shape)}")
    require(tuple(neg_a.shape) == (h_v,) and tuple(dt_bias.shape) == (h_v,), op,
            f"neg_a and dt_bias must be [H_v={h_v}], got {tuple(neg_a.shape)} and {tuple(dt_bias.shape)}")


def _split_heads(op: str, qkv: torch.Tensor, h_k: int, d_k: int, h_v: int, d_v: int) -> None:
    require(h_k > 0 and h_v % h_k == 0, op, f"H_v={h_v} must be a positive multiple of H_k={h_k}")
    require(qkv.shape[1] == 2 * h_k * d_k + h_v * d_v, op,
            f"qkv must have 2*H_k*K + H_v*V = {2 * h_k * d_k + h_v * d_v} columns, got {qkv.shape[1]}")


def check_fused_gdn_decode(qkv: torch.Tensor, conv_weight: torch.Tensor, conv_states: torch.Tensor, z: torch.Tensor,
                           a: torch.Tensor, b: torch.Tensor, neg_a: torch.Tensor, dt_bias: torch.Tensor,
                           norm_weight: torch.Tensor, norm_eps: float, states: torch.Tensor, slots: torch.Tensor,
                           scale: float, num_k_heads: int) -> None:
    """Check the arguments of :func:`fused_gdn_decode` (shapes and dtypes only, no device sync).

    Raises:
        ValueError: ``"fused_gdn_decode: ..."`` when qkv is not ``[B, 2*H_k*K + H_v*V]`` for states
            ``[S, H_v, K, V]`` float32, z not ``[B, H_v*V]``, a / b not ``[B, H_v]``, neg_a / dt_bias not
            ``[H_v]``, norm_weight not ``[V]``, conv_weight / conv_states not ``[C, W]`` / ``[S, C, W-1]``,
            or slots not ``[B]``.
    """
    op = "fused_gdn_decode"
    require_dims(op, qkv=(qkv, 2), states=(states, 4), conv_weight=(conv_weight, 2), conv_states=(conv_states, 3))
    batch, channels = qkv.shape
    _, h_v, d_k, d_v = states.shape
    check_recurrent_states(op, states, h_v, d_k, d_v)
    _split_heads(op, qkv, num_k_heads, d_k, h_v, d_v)
    width = conv_weight.shape[1]
    require(tuple(conv_weight.shape) == (channels, width) and width >= 1, op,
            f"conv_weight must be [C={channels}, W], got {tuple(conv_weight.shape)}")
    require(tuple(conv_states.shape) == (states.shape[0], channels, width - 1), op,
            f"conv_states must be [S={states.shape[0]}, {channels}, {width - 1}], got {tuple(conv_states.shape)}")
    require(tuple(z.shape) == (batch, h_v * d_v), op, f"z must be [{batch}, {h_v * d_v}], got {tuple(z.shape)}")
    _check_gates(op, batch, h_v, a, b, neg_a, dt_bias)
    require(tuple(norm_weight.shape) == (d_v,), op, f"norm_weight must be [V={d_v}], got {tuple(norm_weight.shape)}")
    require(tuple(slots.shape) == (batch,), op, f"slots must be [B={batch}], got {tuple(slots.shape)}")


def check_fused_gdn_prefill(qkv: torch.Tensor, a: torch.Tensor, b: torch.Tensor, neg_a: torch.Tensor,
                            dt_bias: torch.Tensor, cu_seqlens: torch.Tensor, states: torch.Tensor, slots: torch.Tensor,
                            scale: float, num_k_heads: int, head_k_dim: int, head_v_dim: int) -> None:
    """Check the arguments of :func:`fused_gdn_prefill` (shapes and dtypes only, no device sync).

    Raises:
        ValueError: ``"fused_gdn_prefill: ..."`` when qkv is not ``[T, 2*H_k*K + H_v*V]``, states not
            ``[S, H_v, K, V]`` float32, a / b not ``[T, H_v]``, neg_a / dt_bias not ``[H_v]``, cu_seqlens
            not ``[B+1]`` or slots not ``[B]``.
    """
    op = "fused_gdn_prefill"
    require_dims(op, qkv=(qkv, 2), a=(a, 2), states=(states, 4))
    h_v = a.shape[1]
    check_recurrent_states(op, states, h_v, head_k_dim, head_v_dim)
    _split_heads(op, qkv, num_k_heads, head_k_dim, h_v, head_v_dim)
    _check_gates(op, qkv.shape[0], h_v, a, b, neg_a, dt_bias)
    batch = num_sequences(op, cu_seqlens)
    require(tuple(slots.shape) == (batch,), op, f"slots must be [B={batch}], got {tuple(slots.shape)}")


def _l2norm(x: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).sum(-1, keepdim=True) + L2_EPS)).to(x.dtype)


def _prepare(qkv: torch.Tensor, a: torch.Tensor, b: torch.Tensor, neg_a: torch.Tensor, dt_bias: torch.Tensor,
             h_k: int, d_k: int, h_v: int, d_v: int):
    """(q, k ``[T, H_k, K]``, v ``[T, H_v, V]``, g, beta ``[T, H_v]`` float32) from the conv output."""
    rows = qkv.shape[0]
    qk, v = torch.split(qkv, [2 * h_k * d_k, h_v * d_v], dim=-1)
    qk = _l2norm(qk.reshape(rows, 2 * h_k, d_k))
    g = neg_a.float() * F.softplus(a.float() + dt_bias.float())
    beta = torch.sigmoid(b.float())
    return qk[:, :h_k], qk[:, h_k:], v.reshape(rows, h_v, d_v), g, beta


def fused_gdn_decode(qkv: torch.Tensor, conv_weight: torch.Tensor, conv_states: torch.Tensor, z: torch.Tensor,
                     a: torch.Tensor, b: torch.Tensor, neg_a: torch.Tensor, dt_bias: torch.Tensor,
                     norm_weight: torch.Tensor, norm_eps: float, states: torch.Tensor, slots: torch.Tensor,
                     scale: float, num_k_heads: int) -> torch.Tensor:
    """Decode step of a gated DeltaNet layer from its input projection to the gated-norm output.

    Args:
        qkv: ``[B, C]`` raw projection before the conv (``C = 2*H_k*K + H_v*V``); conv_weight: ``[C, W]``
            depthwise kernel (no bias); conv_states: ``[S, C, W-1]`` pool, read at ``slots`` and shifted.
        z: ``[B, H_v*V]`` output gate; a, b: ``[B, H_v]`` raw decay / write-strength projections.
        neg_a: ``[H_v]`` float32 ``-exp(A_log)``; dt_bias: ``[H_v]``; norm_weight: ``[V]``; norm_eps.
        states: ``[S, H_v, K, V]`` float32 pool, updated in place at ``slots`` (``[B]`` int64).
        scale: query scale; num_k_heads: ``H_k``.

    Returns:
        ``[B, H_v*V]`` in qkv's dtype: ``gated_rms_norm(o, z)`` of the rule's output ``o`` (module docs).

    Raises:
        ValueError: inconsistent shapes (:func:`check_fused_gdn_decode`).
    """
    check_fused_gdn_decode(qkv, conv_weight, conv_states, z, a, b, neg_a, dt_bias, norm_weight, norm_eps, states,
                           slots, scale, num_k_heads)
    batch = qkv.shape[0]
    _, h_v, d_k, d_v = states.shape
    conv = causal_conv1d_update(qkv, conv_weight, None, conv_states, slots, "silu")
    q, k, v, g, beta = _prepare(conv, a, b, neg_a, dt_bias, num_k_heads, d_k, h_v, d_v)
    o = gated_delta_rule_decode(q, k, v, g, beta, states, slots, scale)
    y = gated_rms_norm(o, z.reshape(batch, h_v, d_v), norm_weight, norm_eps)
    return y.reshape(batch, h_v * d_v)


def fused_gdn_prefill(qkv: torch.Tensor, a: torch.Tensor, b: torch.Tensor, neg_a: torch.Tensor, dt_bias: torch.Tensor,
                      cu_seqlens: torch.Tensor, states: torch.Tensor, slots: torch.Tensor, scale: float,
                      num_k_heads: int, head_k_dim: int, head_v_dim: int) -> torch.Tensor:
    """A gated DeltaNet layer's prefill after its conv1d: input preparation, then the chunked rule.

    Args:
        qkv: ``[T, C]`` conv output (``C = 2*H_k*K + H_v*V``); a, b: ``[T, H_v]`` raw projections;
            neg_a: ``[H_v]`` float32 ``-exp(A_log)``; dt_bias: ``[H_v]``.
        cu_seqlens, states, slots, scale: as ``gated_delta_rule_prefill``.
        num_k_heads, head_k_dim, head_v_dim: ``H_k``, ``K``, ``V``.

    Returns:
        o ``[T, H_v, V]`` in qkv's dtype; ``states[slots]`` hold the final states.

    Raises:
        ValueError: inconsistent shapes (:func:`check_fused_gdn_prefill`, and the rule's checks).
    """
    check_fused_gdn_prefill(qkv, a, b, neg_a, dt_bias, cu_seqlens, states, slots, scale, num_k_heads, head_k_dim,
                            head_v_dim)
    h_v = a.shape[1]
    q, k, v, g, beta = _prepare(qkv, a, b, neg_a, dt_bias, num_k_heads, head_k_dim, h_v, head_v_dim)
    return gated_delta_rule_prefill(q, k, v, g, beta, cu_seqlens, states, slots, scale)
