"""Gemma attention layers (sliding-window or global, own K/V or another layer's), shared by Gemma 3 and 4.

:class:`GemmaAttention` is the common layer: q/k projections with per-head q/k RMSNorms, an optional
per-head v RMSNorm, rotary on q and k (the layer kind's table), grouped-query attention over the paged
cache with the layer kind's window, and ``o_proj``. The two families differ only in its knobs:

* Gemma 4 (:class:`Gemma4Attention`): softmax scale 1.0 (the norms fix the logit scale), norms multiply
  by ``w``, a weightless v RMSNorm (inside the ``qkv_norm_rope_cache`` op with the q/k norms, rotary and the
  cache write where a kernel serves it); with ``attention_k_eq_v`` a global layer has no ``v_proj`` (V is the K
  projection before ``k_norm``); a KV-shared layer has only ``q_proj`` / ``q_norm`` / ``o_proj`` and
  attends over its source layer's cache (:class:`~anna_core.cache_spec.FullAttentionSpec` ``shared``),
  writing nothing.
* Gemma 3 (``anna_gemma4.gemma3.model``): softmax scale ``query_pre_attn_scalar ** -0.5``, norms multiply
  by ``1 + w``, no v norm, every layer has its own K/V.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from anna_core.engine.forward_batch import ForwardBatch
from anna_core.layers.attention import PagedAttention
from anna_core.layers.linear import merge_linears
from anna_core.layers.norm import RMSNorm
from anna_core.layers.rotary import RotaryEmbedding
from anna_core.model import ModelCaches
from torch import nn

from anna_gemma4.config import SLIDING, Gemma4Config, LayerSpec


class GemmaAttention(nn.Module):
    """Parameters (checkpoint names under ``self_attn.``): ``q_proj`` ``[H*D, hidden]``, ``o_proj``
    ``[hidden, H*D]``, ``q_norm`` ``[D]``; unless KV-shared also ``k_proj`` ``[H_kv*D, hidden]``,
    ``k_norm`` ``[D]`` and, unless ``k_eq_v``, ``v_proj`` ``[H_kv*D, hidden]`` (biases with ``bias``).

    Args:
        hidden: model width; num_heads: query heads ``H``; layer: this layer's :class:`LayerSpec`
            (kind, head dim ``D``, KV heads ``H_kv``, KV owner, ``k_eq_v``).
        eps: the q/k/v norms' epsilon; bias: projection biases.
        window: the sliding window of a ``sliding_attention`` layer (None: global).
        scale: the softmax scale.
        zero_centered: the q/k norms store ``w - 1`` (Gemma 3) rather than ``w`` (Gemma 4).
        v_norm: normalise V per head with a weightless RMSNorm (Gemma 4).
        group, kv_index: its cache group and the index of the K/V tensors it uses in it.
        rotary: the rotary table of its layer kind (shared by those layers).
        ops: the model's :class:`anna_core.kernels.OpTable`.
    """

    def __init__(self, *, hidden: int, num_heads: int, layer: LayerSpec, eps: float, bias: bool, window: int | None,
                 scale: float, zero_centered: bool, v_norm: bool, group: int, kv_index: int, rotary: RotaryEmbedding,
                 ops: Any):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, layer.num_kv_heads, layer.head_dim
        H, H_kv, D = self.num_heads, self.num_kv_heads, self.head_dim
        self.shares_kv = layer.kv_owner is not None
        self.k_eq_v = layer.k_eq_v
        self.q_proj = nn.Linear(hidden, H * D, bias=bias)
        self.q_norm = RMSNorm(D, eps, ops, zero_centered=zero_centered)
        self.v_norm = None
        if not self.shares_kv:
            self.k_proj = nn.Linear(hidden, H_kv * D, bias=bias)
            self.v_proj = None if layer.k_eq_v else nn.Linear(hidden, H_kv * D, bias=bias)
            self.k_norm = RMSNorm(D, eps, ops, zero_centered=zero_centered)
            if v_norm:
                self.v_norm = RMSNorm(D, eps, ops, scale=False)
        self.o_proj = nn.Linear(H * D, hidden, bias=bias)
        self.qkv_proj: nn.Linear | None = None
        self.ops = ops
        self._rotary = (rotary,)  # shared by the layers of a kind: a tuple keeps it out of the submodules
        self.attn = PagedAttention(H, H_kv, D, scale, group, kv_index, ops, sliding_window=window,
                                   writes_kv=not self.shares_kv)

    def merge_projections(self) -> None:
        """Replace the q/k/v projections (q/k with ``k_eq_v``; nothing to merge in a KV-shared layer) by one
        ``qkv_proj`` (same input, one GEMM). Call once, after the weights are loaded."""
        if self.shares_kv or self.qkv_proj is not None:
            return
        parts = [self.q_proj, self.k_proj] + ([] if self.v_proj is None else [self.v_proj])
        self.qkv_proj = merge_linears(parts)
        del self.q_proj, self.k_proj
        if self.v_proj is not None:
            del self.v_proj
        self.v_proj = None

    def _qkv_sizes(self) -> list[int]:
        """Output widths of the merged projection's parts: q, k and (unless ``k_eq_v``) v."""
        kv = self.num_kv_heads * self.head_dim
        return [self.num_heads * self.head_dim, kv] + ([] if self.k_eq_v else [kv])

    def unmerged_weights(self) -> dict[str, torch.Tensor]:
        """The q/k/v projection tensors under their checkpoint names (``q_proj.weight``, ``k_proj.weight``,
        ``v_proj.weight`` unless ``k_eq_v``; biases too), row slices of the merged ``qkv_proj`` once merged:
        views, no copy. Empty before merging and in a KV-shared layer (its ``q_proj`` is a parameter)."""
        if self.qkv_proj is None:
            return {}
        names = ["q_proj", "k_proj"] + ([] if self.k_eq_v else ["v_proj"])
        sizes = self._qkv_sizes()
        out = {}
        for kind, merged in (("weight", self.qkv_proj.weight), ("bias", self.qkv_proj.bias)):
            if merged is not None:
                out.update({f"{n}.{kind}": t for n, t in zip(names, torch.split(merged.detach(), sizes), strict=True)})
        return out

    def input_projection(self) -> nn.Linear | None:
        """The one projection that reads the block's normalised input, so a caller may fuse the norm (and the
        previous block's tail) into it and pass its output as ``forward(projected=...)``: the merged
        ``qkv_proj``, or ``q_proj`` in a KV-shared layer; None while q/k/v are separate (before
        :meth:`merge_projections`)."""
        return self.q_proj if self.shares_kv else self.qkv_proj

    def _project(self, x: torch.Tensor | None,
                 projected: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """x ``[T, hidden]`` (or ``projected`` = :meth:`input_projection` of it, ``[T, N]``) -> q ``[T, H, D]``,
        k, v ``[T, H_kv, D]`` (None in a KV-shared layer; v is k's view with ``k_eq_v``): strided views of the
        merged projection's output when merged."""
        H, H_kv, D = self.num_heads, self.num_kv_heads, self.head_dim
        if projected is None:
            if x is None:
                raise ValueError("GemmaAttention: pass x or its projection")
            projection = self.input_projection()
            if projection is None:  # separate q/k/v projections
                q, k = self.q_proj(x), self.k_proj(x)
                v = k if self.v_proj is None else self.v_proj(x)
                T = x.shape[0]
                return q.view(T, H, D), k.view(T, H_kv, D), v.view(T, H_kv, D)
            projected = projection(x)
        T = projected.shape[0]
        if self.shares_kv:
            return projected.view(T, H, D), None, None
        q, k, *rest = torch.split(projected, self._qkv_sizes(), dim=-1)
        v = rest[0] if rest else k
        return q.view(T, H, D), k.view(T, H_kv, D), v.view(T, H_kv, D)

    def _fused(self, batch: ForwardBatch, caches: ModelCaches) -> tuple[Any, str]:
        """``(op, what)``: the fused pre-processing op of this layer where a kernel (not only the torch reference)
        serves it and positions are 1-D, and what it covers — in a KV-shared layer ``q_norm_rope_attention``
        (``"q+attention"``: the query norm and rotary done by the attention kernel) or ``q_norm_rope`` (``"q"``);
        else, for a layer with a v norm, ``qkv_norm_rope_cache_attention`` (``"qkv+attention"``: the q/k/v norms,
        rotary, cache write and attention) or ``qkv_norm_rope_cache`` (``"qkv"``), or ``qk_norm_rope_cache``
        (``"qk"``) — and ``(None, "")`` otherwise (the unfused norms, rotary and cache write run, each chosen on its
        own). In a quantized cache group only ``q_norm_rope`` may fuse: the others write unquantized rows or run the
        unquantized attention."""
        if batch.positions.dim() != 1:
            return None, ""
        quantized = self.attn.quantized(caches)
        if self.shares_kv:
            candidates = [("q_norm_rope_attention", "q+attention")] * (not quantized) + [("q_norm_rope", "q")]
        elif quantized:
            return None, ""
        else:
            with_v = [("qkv_norm_rope_cache_attention", "qkv+attention"), ("qkv_norm_rope_cache", "qkv")]
            candidates = with_v * (self.v_norm is not None) + [("qk_norm_rope_cache", "qk")]
        for op, what in candidates:
            fused = self.ops.accelerated(op, head_dim=self.head_dim)
            if fused is not None:
                return fused, what
        return None, ""

    def forward(self, x: torch.Tensor | None, batch: ForwardBatch, caches: ModelCaches,
                cos_sin: Callable[[], tuple[torch.Tensor, torch.Tensor]],
                projected: torch.Tensor | None = None) -> torch.Tensor:
        """x: ``[T, hidden]`` (the block's normalised input) -> ``[T, hidden]``.

        ``projected``: :meth:`input_projection` of x, computed by the caller (e.g. fused with the norm before
        it); x is then unused (pass None). ``cos_sin``: gives this layer kind's ``rotary.cos_sin(batch.positions)``
        (:meth:`anna_gemma4.common.RotaryTables.of`: computed once per pass, and only if an unfused layer calls it;
        the fused path computes its angles itself).
        Side effect (unless KV-shared): the layer's K/V are written into its cache group.

        Raises:
            ValueError: neither x nor projected is given.
        """
        rotary = self._rotary[0]
        q, k, v = self._project(x, projected)
        T = q.shape[0]
        fused, what = self._fused(batch, caches)
        if self.v_norm is not None and v is not None and not what.startswith("qkv"):
            v = self.v_norm(v)
        if fused is not None:  # q/k(/v) norms, rotary (and the cache write, or the attention) in one kernel
            qn = self.q_norm
            inv_freq = rotary._tables(q.device)[0]
            if what == "q+attention":
                o = fused(q, qn.weight, qn.eps, qn.zero_centered, batch.positions, inv_freq,
                          *self.attn.attention_args(batch, caches))
            elif what == "qkv+attention":
                k_cache, v_cache, slots = self.attn.kv_cache(batch, caches)
                _, _, *attention = self.attn.attention_args(batch, caches)  # cu_seqlens ... window
                o = fused(q, k, v, qn.weight, self.k_norm.weight, qn.eps, qn.zero_centered, batch.positions, inv_freq,
                          k_cache, v_cache, slots, *attention)
            elif what == "q":  # a KV-shared layer: its PagedAttention reads the owner's K/V (and ring rows it holds)
                q = fused(q, qn.weight, qn.eps, qn.zero_centered, batch.positions, inv_freq)
                o = self.attn(q, None, None, batch, caches)
            else:
                k_cache, v_cache, slots = self.attn.kv_cache(batch, caches)
                q = fused(q, k, v, qn.weight, self.k_norm.weight, qn.eps, qn.zero_centered, batch.positions,
                          inv_freq, k_cache, v_cache, slots)
                o = self.attn.attend(q, batch, caches)
        else:
            table = cos_sin()
            q = rotary.rotate(self.q_norm(q), table)
            if k is not None:
                k = rotary.rotate(self.k_norm(k), table)
            o = self.attn(q, k, v, batch, caches)  # [T, H, D]
        return self.o_proj(o.reshape(T, self.num_heads * self.head_dim))


class Gemma4Attention(GemmaAttention):
    """Gemma 4's attention: scale 1.0, q/k norms multiplying by ``w``, a weightless v norm, KV sharing and
    ``attention_k_eq_v`` as :class:`LayerSpec` says (see :class:`GemmaAttention` for the parameters).

    Args:
        cfg: the model config; layer: this layer's :class:`LayerSpec`.
        group, kv_index: its cache group and the index of the K/V tensors it uses in it.
        rotary: the rotary table of its layer kind (shared by those layers).
        ops: the model's :class:`anna_core.kernels.OpTable`.
    """

    def __init__(self, cfg: Gemma4Config, layer: LayerSpec, group: int, kv_index: int, rotary: RotaryEmbedding,
                 ops: Any):
        super().__init__(hidden=cfg.hidden_size, num_heads=cfg.num_attention_heads, layer=layer, eps=cfg.rms_norm_eps,
                         bias=cfg.attention_bias, window=cfg.sliding_window if layer.kind == SLIDING else None,
                         scale=1.0, zero_centered=False, v_norm=True, group=group, kv_index=kv_index, rotary=rotary,
                         ops=ops)
