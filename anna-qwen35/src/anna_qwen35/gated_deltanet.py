"""Qwen3.5's gated DeltaNet token mixer (Yang et al., "Gated Delta Networks", 2024).

Per token: project to q/k/v (one fused ``in_proj_qkv``), a gate ``z``, and per-value-head ``a``,
``b``; run q/k/v through a depthwise causal conv1d + SiLU; L2-normalise q and k; decay
``g = -exp(A_log) * softplus(a + dt_bias)`` (log space, float32) and write strength
``beta = sigmoid(b)``; the gated delta rule mixes tokens through a per-sequence float32 state;
a gated RMSNorm (``rms_norm(o) * weight * silu(z)``) and ``out_proj`` finish.

After loading, :meth:`GatedDeltaNet.merge_projections` concatenates the four input projections
(they read the same input) into one ``in_proj_all`` matrix, so a decode step reads the layer's
input once and launches one GEMM instead of four. Pre-quantized parts that cannot share one layout
(dense ``in_proj_b`` / ``in_proj_a`` beside quantized ``in_proj_qkv`` / ``in_proj_z``; FP8 ``in_proj_b``
whose ``H_v`` rows end inside a 128-row scale block; act-order parts of different column orders) merge
in runs instead (:func:`~anna_core.layers.linear.merge_linear_runs`), each quantized part staying quantized.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from anna_core.engine.forward_batch import ForwardBatch
from anna_core.layers.linear import merge_linear_runs, merge_linears
from anna_core.layers.padding import mask_rows, write_conv_state
from anna_core.layers.state_checkpoints import run_prefill_rule, save_conv_checkpoints
from anna_core.model import ModelCaches
from torch import nn

from anna_qwen35.config import Qwen35Config

L2_EPS = 1e-6  # as FLA's / HF's l2norm: x * rsqrt(sum(x^2) + eps)


class DepthwiseConv(nn.Module):
    """Holds the conv weight in the checkpoint's ``nn.Conv1d`` shape ``[C, 1, W]`` (no bias)."""

    def __init__(self, channels: int, width: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(channels, 1, width))


class GatedRMSNorm(nn.Module):
    """``rms_norm(x) * weight * silu(z)`` per value head (``weight``: ``[V]``, initialised to ones)."""

    def __init__(self, dim: int, eps: float, ops: Any):
        super().__init__()
        self.eps = eps
        self.ops = ops
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """x, z: ``[..., V]`` -> ``[..., V]``."""
        return self.ops.gated_rms_norm(x, z, self.weight, self.eps)


def l2_normalize(x: torch.Tensor) -> torch.Tensor:
    """``x / sqrt(sum(x^2) + 1e-6)`` over the last dim, in float32, returned in x's dtype."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).sum(-1, keepdim=True) + L2_EPS)).to(x.dtype)


class GatedDeltaNet(nn.Module):
    """One linear-attention layer; its state lives in the recurrent cache group ``group``'s
    ``conv[state_index]`` and ``recurrent[state_index]`` at the batch's ``state_slots``.

    Parameters (checkpoint names under ``linear_attn.``): ``in_proj_qkv`` ``[2*H_k*K + H_v*V, hidden]``
    (q, k, v concatenated in that order), ``in_proj_z`` ``[H_v*V, hidden]``, ``in_proj_b`` and
    ``in_proj_a`` ``[H_v, hidden]``, ``conv1d.weight`` ``[C, 1, W]`` (``C = 2*H_k*K + H_v*V``),
    ``A_log`` and ``dt_bias`` ``[H_v]`` (kept float32), ``norm.weight`` ``[V]``, ``out_proj``
    ``[hidden, H_v*V]``.
    """

    def __init__(self, cfg: Qwen35Config, group: int, state_index: int, ops: Any):
        super().__init__()
        self.group = group
        self.state_index = state_index
        self.ops = ops
        self.num_k_heads = cfg.linear_num_key_heads
        self.num_v_heads = cfg.linear_num_value_heads
        self.head_k_dim = cfg.linear_key_head_dim
        self.head_v_dim = cfg.linear_value_head_dim
        self.key_dim = self.num_k_heads * self.head_k_dim
        self.value_dim = self.num_v_heads * self.head_v_dim
        self.conv_dim = 2 * self.key_dim + self.value_dim
        self.conv_width = cfg.linear_conv_kernel_dim
        hidden = cfg.hidden_size
        self.in_proj_qkv = nn.Linear(hidden, self.conv_dim, bias=False)
        self.in_proj_z = nn.Linear(hidden, self.value_dim, bias=False)
        self.in_proj_b = nn.Linear(hidden, self.num_v_heads, bias=False)
        self.in_proj_a = nn.Linear(hidden, self.num_v_heads, bias=False)
        self.conv1d = DepthwiseConv(self.conv_dim, self.conv_width)
        self.A_log = nn.Parameter(torch.zeros(self.num_v_heads))
        self.dt_bias = nn.Parameter(torch.ones(self.num_v_heads))
        self.norm = GatedRMSNorm(self.head_v_dim, cfg.rms_norm_eps, ops)
        self.out_proj = nn.Linear(self.value_dim, hidden, bias=False)
        self.scale = self.head_k_dim**-0.5
        self.in_proj_all: nn.Linear | None = None
        self.in_proj_rest = nn.ModuleList()  # the runs after in_proj_all when the parts merge in runs
        self._run_sizes: list[list[int]] = []  # each run's parts' output widths (in_proj_all's first)
        self._neg_a: torch.Tensor | None = None

    def merge_projections(self) -> None:
        """Replace ``in_proj_qkv``, ``in_proj_z``, ``in_proj_b``, ``in_proj_a`` by one ``in_proj_all``
        (rows in that order) and precompute ``-exp(A_log)``. Call once, after the weights are loaded.

        With pre-quantized parts (:class:`~anna_core.layers.wq_linear.WQLinear`) that cannot share one quantized
        weight, merging all four would dequantize them; they merge in runs of consecutive parts instead
        (:func:`~anna_core.layers.linear.merge_linear_runs`): ``in_proj_all`` holds the first run, ``in_proj_rest``
        the others. E.g. dense ``in_proj_b`` / ``in_proj_a`` (quantizers skip their ``H_v`` rows, too few to pack):
        ``[qkv, z]`` quantized, ``[b, a]`` dense; FP8 ``in_proj_b`` / ``in_proj_a`` (``H_v`` rows, inside one
        128-row scale block): ``[qkv, z, b]`` and ``[a]``, both FP8 (``[qkv, z]``, ``[b]``, ``[a]`` where ``z``'s
        rows do not end on a block either); act-order parts of four column orders: four quantized runs."""
        if self.in_proj_all is not None:
            return
        from anna_core.layers.wq_linear import WQLinear

        parts = [self.in_proj_qkv, self.in_proj_z, self.in_proj_b, self.in_proj_a]
        sizes = [self.conv_dim, self.value_dim, self.num_v_heads, self.num_v_heads]
        if any(isinstance(m, WQLinear) for m in parts):
            runs = merge_linear_runs(parts)
        else:
            runs = [(merge_linears(parts), len(parts))]
        self.in_proj_all = runs[0][0]
        self.in_proj_rest = nn.ModuleList(run for run, _ in runs[1:])
        self._run_sizes, first = [], 0
        for _, count in runs:
            self._run_sizes.append(sizes[first:first + count])
            first += count
        del self.in_proj_qkv, self.in_proj_z, self.in_proj_b, self.in_proj_a
        self._neg_a = -torch.exp(self.A_log.detach().float())

    def _project(self, x: torch.Tensor, pre_norm=None):
        """x ``[T, hidden]`` -> (qkv ``[T, C]``, z ``[T, H_v*V]``, b, a ``[T, H_v]``), new residual
        (None without ``pre_norm``; see :meth:`forward`)."""
        residual = None
        sizes = [self.conv_dim, self.value_dim, self.num_v_heads, self.num_v_heads]
        if len(self.in_proj_rest):  # the parts merged in runs: the norm runs once, then each run
            if pre_norm is not None:
                norm, residual = pre_norm
                x, residual = norm.add_and_norm(x, residual)
            runs = [self.in_proj_all, *self.in_proj_rest]
            return tuple(part for run, run_sizes in zip(runs, self._run_sizes)
                         for part in torch.split(run(x), run_sizes, dim=-1)), residual
        if pre_norm is not None:
            norm, residual = pre_norm
            if self.in_proj_all is not None:  # add + norm fused into the merged projection
                parts, residual = norm.add_norm_linear(x, residual, self.in_proj_all)
                return torch.split(parts, sizes, dim=-1), residual
            x, residual = norm.add_and_norm(x, residual)
        if self.in_proj_all is None:
            return (self.in_proj_qkv(x), self.in_proj_z(x), self.in_proj_b(x), self.in_proj_a(x)), residual
        return torch.split(self.in_proj_all(x), sizes, dim=-1), residual

    def _fused_step(self):
        """The ``fused_gdn_decode`` op chosen for this layer's head dims (anna-xpu-kernels' Triton kernel
        where its probe accepts them), or None: before :meth:`merge_projections` (it needs ``-exp(A_log)``),
        or where only the op's torch reference would run it (the layer then composes the unfused ops, each
        chosen on its own: :meth:`anna_core.kernels.OpTable.accelerated`).

        Its signature (``anna_core.kernels.ops``): ``fused(qkv_before_conv [T, C], conv_w [C, W],
        conv_states [S, C, W-1], z, a, b, neg_a, dt_bias, norm_weight, norm_eps, states, slots, scale,
        num_k_heads) -> [T, H_v*V]``; it also performs the conv1d update (the separate
        ``causal_conv1d_update`` is skipped)."""
        if self._neg_a is None:
            return None
        return self.ops.accelerated("fused_gdn_decode", head_k_dim=self.head_k_dim, head_v_dim=self.head_v_dim)

    def _fused_prefill(self):
        """The ``fused_gdn_prefill`` op chosen for this layer's head dims (anna-xpu-kernels' fla one where
        its probe accepts), or None before :meth:`merge_projections` or where only its torch reference
        would run it (the unfused ops then, as for :meth:`_fused_step`).

        Its signature: ``fused(qkv_after_conv [T, C], a, b, neg_a, dt_bias, cu_seqlens, states, slots,
        scale, num_k_heads, head_k_dim, head_v_dim) -> o [T, H_v, V]``: the L2 norms, ``g`` and ``beta``
        of :meth:`_mix`'s unfused path, then ``gated_delta_rule_prefill``."""
        if self._neg_a is None:
            return None
        return self.ops.accelerated("fused_gdn_prefill", head_k_dim=self.head_k_dim, head_v_dim=self.head_v_dim)

    def forward(self, x: torch.Tensor, batch: ForwardBatch, caches: ModelCaches, pre_norm=None):
        """x: ``[T, hidden]`` -> ``[T, hidden]``; updates this layer's conv and recurrent states in place.

        With ``pre_norm = (norm, residual)`` (the block's input RMSNorm and the residual stream, or
        None in the first block) x is the previous block's output: the layer runs on
        ``norm(x + residual)`` (add and norm fused into the input projection) and returns
        ``(output, x + residual)``.
        """
        if pre_norm is not None:
            (qkv, z, b, a), residual = self._project(x, pre_norm)
            return self._mix(qkv, z, b, a, batch, caches), residual
        (qkv, z, b, a), _ = self._project(x)
        return self._mix(qkv, z, b, a, batch, caches)

    def _mix(self, qkv, z, b, a, batch: ForwardBatch, caches: ModelCaches) -> torch.Tensor:
        """The layer after its input projection: qkv ``[T, C]``, z ``[T, H_v*V]``, b, a ``[T, H_v]``
        -> ``[T, hidden]``."""
        T = qkv.shape[0]
        cache = caches.state(self.group)
        conv_states = cache.conv[self.state_index]  # [S, C, W-1]
        states = cache.recurrent[self.state_index]  # [S, H_v, K, V] float32
        slots = batch.state_slots
        conv_w = self.conv1d.weight.squeeze(1)  # [C, W]
        if batch.is_decode:
            fused = self._fused_step()
            if fused is not None:  # conv update, L2 norm, gating, recurrent update and gated norm in one kernel
                o = fused(qkv, conv_w, conv_states, z, a, b, self._neg_a, self.dt_bias, self.norm.weight,
                          self.norm.eps, states, slots, self.scale, self.num_k_heads)
                return self.out_proj(o)
            qkv = self.ops.causal_conv1d_update(qkv, conv_w, None, conv_states, slots, "silu")
        else:
            raw = qkv
            if batch.num_valid is not None:  # a padded prefill: padding rows neither decay nor write the state
                a, b = mask_rows(a, batch.num_valid, float("-inf")), mask_rows(b, batch.num_valid, float("-inf"))
            qkv = self.ops.causal_conv1d_prefill(qkv, conv_w, None, batch.cu_seqlens, conv_states, slots, "silu")
            if batch.num_valid is not None:  # the conv state ends at the last real row; padding q/k/v are 0
                write_conv_state(conv_states, slots, raw, batch.num_valid)
                qkv = mask_rows(qkv, batch.num_valid, 0.0)
            if batch.checkpoints is not None:  # snapshots inside the pass: the conv states at each boundary
                save_conv_checkpoints(batch.checkpoints, self.state_index, raw)
            fused = self._fused_prefill()
            if fused is not None:  # L2 norms, gating and the chunked rule without the torch glue between them
                def rule(rows, cu_seqlens, seq_slots):
                    return fused(qkv[rows], a[rows], b[rows], self._neg_a, self.dt_bias, cu_seqlens, states, seq_slots,
                                 self.scale, self.num_k_heads, self.head_k_dim, self.head_v_dim)
                return self._output(run_prefill_rule(batch, self.state_index, states, rule), z)
        qk, v = torch.split(qkv, [2 * self.key_dim, self.value_dim], dim=-1)
        qk = l2_normalize(qk.reshape(T, 2 * self.num_k_heads, self.head_k_dim))  # [T, 2*H_k, K], q then k
        q, k = qk[:, : self.num_k_heads], qk[:, self.num_k_heads :]  # [T, H_k, K] each
        v = v.reshape(T, self.num_v_heads, self.head_v_dim)  # [T, H_v, V]

        neg_a = self._neg_a if self._neg_a is not None else -torch.exp(self.A_log.float())
        g = neg_a * F.softplus(a.float() + self.dt_bias.float())  # [T, H_v] fp32, <= 0
        beta = torch.sigmoid(b.float())  # [T, H_v] fp32

        if batch.is_decode:
            o = self.ops.gated_delta_rule_decode(q, k, v, g, beta, states, slots, self.scale)
        else:
            def rule(rows, cu_seqlens, seq_slots):
                return self.ops.gated_delta_rule_prefill(q[rows], k[rows], v[rows], g[rows], beta[rows], cu_seqlens,
                                                         states, seq_slots, self.scale)
            o = run_prefill_rule(batch, self.state_index, states, rule)
        return self._output(o, z)

    def _output(self, o: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """The gated norm and ``out_proj``: o ``[T, H_v, V]``, z ``[T, H_v*V]`` -> ``[T, hidden]``."""
        T = o.shape[0]
        o = self.norm(o, z.reshape(T, self.num_v_heads, self.head_v_dim))
        return self.out_proj(o.reshape(T, self.value_dim))
