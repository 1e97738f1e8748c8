"""Multi-head attention over the paged KV cache (the attention step only, no projections)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from anna_core.cache_spec import CacheSpec, FullAttentionSpec, SlidingWindowSpec
from anna_core.engine.forward_batch import ForwardBatch
from anna_core.errors import AnnaError
from anna_core.kv_quant.residual import rotated_rows, write_residual
from anna_core.layers.padding import valid_lens
from anna_core.model import ModelCaches


class PagedAttention(nn.Module):
    """Writes a step's K/V into the paged cache, then attends causally over each sequence's context.

    Grouped-query attention (Ainslie et al., 2023): query head ``h`` reads KV head
    ``h // (num_heads // num_kv_heads)``. The math and cache layout are the ``reshape_and_cache``
    and ``paged_attention`` ops of :mod:`anna_core.kernels.ops`; in a group the engine quantized
    (``AttentionCache.quant``: TurboQuant, :mod:`anna_core.kv_quant`) the ``turboquant_cache_write`` and
    ``paged_attention_turboquant`` ops.

    Args:
        num_heads: query heads ``H_q``.
        num_kv_heads: key/value heads ``H_kv`` (divides ``H_q``).
        head_dim: ``D``.
        scale: softmax scale (usually ``D ** -0.5``).
        group: the index of this layer's cache group in the model's
            :class:`~anna_core.cache_spec.CacheSpec` (an attention group).
        kv_index: index of the K/V tensors this layer uses within the group
            (:meth:`~anna_core.cache_spec.FullAttentionSpec.cache_index`: its own, or its owner's when it
            shares another layer's K/V).
        ops: the model's :class:`anna_core.kernels.OpTable`.
        sliding_window: attend only to the last ``sliding_window`` positions (None: full context);
            the group's window for a sliding-window group.
        writes_kv: False for a layer that reads another layer's K/V (KV sharing): it writes none.

    Raises:
        ValueError: ``num_heads`` is not a multiple of ``num_kv_heads``.
    """

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, scale: float, group: int, kv_index: int,
                 ops: Any, sliding_window: int | None = None, writes_kv: bool = True):
        super().__init__()
        if num_kv_heads <= 0 or num_heads % num_kv_heads:
            raise ValueError(f"num_heads ({num_heads}) must be a positive multiple of num_kv_heads ({num_kv_heads})")
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.scale = float(scale)
        self.group = group
        self.kv_index = kv_index
        self.sliding_window = sliding_window
        self.writes_kv = writes_kv
        self.ops = ops
        self._attend: Any = None

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, batch: ForwardBatch,
                caches: ModelCaches) -> torch.Tensor:
        """q: ``[T, H_q, D]``; k, v: ``[T, H_kv, D]`` (rotary already applied) -> ``[T, H_q, D]``.

        Side effect: k, v are written to the group's cache ``kv_index`` at the group's ``slot_mapping``
        (unless the layer reads another layer's K/V: then k and v may be None, and in a group with a residual ring
        the last reader of its owner writes the ring rows the owner held for its readers in a prefill step).
        """
        if not self.writes_kv:
            return self._attend_shared(q, batch, caches)
        k_cache, v_cache, slot_mapping = self.kv_cache(batch, caches)
        group = caches.attention(self.group)
        if group.quant is None:
            self.ops.reshape_and_cache(k, v, k_cache, v_cache, slot_mapping)
            return self.attend(q, batch, caches)
        self.ops.turboquant_cache_write(k, v, k_cache, v_cache, slot_mapping, *group.quant.args)
        ring = group.residual
        if ring is None:
            return self.attend(q, batch, caches)
        # the per-query exact window (anna_core.kv_quant.residual): the step's own rows come from `new`, earlier
        # positions from the ring as it stood before the step; each sequence's first new position evicts an entry
        # no query reads, so it is written first (a decode step is then complete before its attention, which reads the
        # ring alone: the contract's result, and the batched decode path of the reference)
        new = rotated_rows(k, v, group.quant.rotation, ring.k[self.kv_index].dtype)
        args = self._ring_write_args(batch, caches, new)
        write_residual(*args, part="all" if batch.is_decode else "first", rotated=new)
        o = self.attend(q, batch, caches, new=None if batch.is_decode else new)
        if ring.readers[self.kv_index]:  # KV sharing: the readers attend over this ring and rows; the last writes them
            ring.hold(self.kv_index, None if batch.is_decode else new)
        elif not batch.is_decode:
            write_residual(*args, part="rest", rotated=new)
        return o

    def _attend_shared(self, q: torch.Tensor, batch: ForwardBatch, caches: ModelCaches) -> torch.Tensor:
        """A KV-sharing layer's attention over its owner's K/V with the owner's per-query window: in a prefill step
        over a residual ring, the ring as the owner attended over it plus the step's rows the owner holds
        (:meth:`~anna_core.kv_quant.residual.ResidualRing.hold`); the owner's last reader then writes their
        ``"rest"`` part into the ring (once: nothing at decode, whose rows the owner wrote before attending)."""
        ring = caches.attention(self.group).residual
        held = None if ring is None else ring.held.get(self.kv_index)
        if held is None:
            return self.attend(q, batch, caches)
        new = (held.k, held.v)
        o = self.attend(q, batch, caches, new=new)
        if ring.release(self.kv_index) is not None:
            write_residual(*self._ring_write_args(batch, caches, new), part="rest", rotated=new)
        return o

    def _ring_write_args(self, batch: ForwardBatch, caches: ModelCaches,
                         rows: tuple[torch.Tensor, torch.Tensor]) -> tuple[Any, ...]:
        """The positional arguments of :func:`~anna_core.kv_quant.residual.write_residual` writing this layer's
        (or its owner's) ``rows`` (rotated, ``[T, H_kv, D]`` each) of ``batch`` into its group's ring."""
        group = caches.attention(self.group)
        return (*rows, group.residual, self.kv_index, group.quant.rotation, batch.state_slots, batch.cu_seqlens,
                batch.seq_lens, valid_lens(batch.seq_lens, batch.num_tokens, batch.num_valid))

    def quantized(self, caches: ModelCaches) -> bool:
        """Whether this layer's cache group is quantized: its K/V go through :meth:`forward` (a fused op that
        writes the cache itself, e.g. ``qk_norm_rope_cache``, writes unquantized rows and must not be used)."""
        return caches.attention(self.group).quant is not None

    def kv_cache(self, batch: ForwardBatch, caches: ModelCaches) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(k_cache, v_cache, slot_mapping)`` of this layer in this step: its group's K/V tensors
        ``[num_blocks, block_size, H_kv, D]`` and the ``[T]`` int64 slots the step's tokens go to (for a
        caller that writes K/V through a fused op, e.g. ``qk_norm_rope_cache``)."""
        k_cache, v_cache = caches.attention(self.group).layer(self.kv_index)
        return k_cache, v_cache, batch.tables[self.group].slot_mapping

    def attend(self, q: torch.Tensor, batch: ForwardBatch, caches: ModelCaches,
               new: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """Attention of q ``[T, H_q, D]`` (rotary applied) over the cache as it stands (this step's K/V
        already written) -> ``[T, H_q, D]``. ``new``: in a group with a residual ring, the step's own K/V rows as
        the ring stores them (:func:`~anna_core.kv_quant.residual.rotated_rows`, ``[T, H_kv, D]`` each), read
        exactly inside each query's window (``new_k`` / ``new_v`` of ``paged_attention_turboquant``; in a layer
        reading another layer's K/V, the owner's); None (a decode step): the ring as it stands."""
        group = caches.attention(self.group)
        k_cache, v_cache = group.layer(self.kv_index)
        table = batch.tables[self.group]
        if group.quant is not None:
            attend = self.ops.get("paged_attention_turboquant", head_dim=self.head_dim)
            ring = group.residual
            # the ring holds each sequence's newest real positions: a padded prefill's padding rows are not among them
            residual = () if ring is None else (ring.k[self.kv_index], ring.v[self.kv_index], ring.pos,
                                                batch.state_slots,
                                                valid_lens(batch.seq_lens, batch.num_tokens, batch.num_valid),
                                                *(() if new is None else new))
            return attend(q, k_cache, v_cache, batch.cu_seqlens, batch.seq_lens, table.block_tables, self.scale,
                          self.sliding_window, *group.quant.args, *residual)
        attend = self._attend
        if attend is None:  # resolved once: the choice depends on the device, dtype and head dim only
            attend = self._attend = self.ops.get("paged_attention", head_dim=self.head_dim)
        return attend(q, k_cache, v_cache, batch.cu_seqlens, batch.seq_lens, table.block_tables,
                      self.scale, self.sliding_window)

    def attention_args(self, batch: ForwardBatch, caches: ModelCaches) -> tuple[Any, ...]:
        """``(k_cache, v_cache, cu_seqlens_q, seq_lens, block_tables, scale, sliding_window)``: the arguments after q
        of ``paged_attention`` in this step, for a caller that runs attention through a fused op (e.g.
        ``q_norm_rope_attention``)."""
        k_cache, v_cache = caches.attention(self.group).layer(self.kv_index)
        return (k_cache, v_cache, batch.cu_seqlens, batch.seq_lens, batch.tables[self.group].block_tables, self.scale,
                self.sliding_window)

    def extra_repr(self) -> str:
        return (f"heads={self.num_heads}, kv_heads={self.num_kv_heads}, head_dim={self.head_dim}, "
                f"group={self.group}, kv_index={self.kv_index}, sliding_window={self.sliding_window}, "
                f"writes_kv={self.writes_kv}")


def check_attention_layers(model: nn.Module, spec: CacheSpec) -> None:
    """Check every :class:`PagedAttention` of ``model`` against the cache group it names (once, when an
    engine is built): an attention group, a tensor index inside it, its K/V geometry, and its window (the
    group's ``window`` for a sliding-window group, None for a full-attention one), since the engine drops
    blocks by the group's window.

    Raises:
        AnnaError: a layer that disagrees with its group, naming the module.
    """
    for name, module in model.named_modules():
        if not isinstance(module, PagedAttention):
            continue
        g = module.group
        group = spec.groups[g] if 0 <= g < len(spec.groups) else None
        if not isinstance(group, FullAttentionSpec):
            raise AnnaError(f"{name}: cache group {g} is not an attention group of the model's cache spec")
        if not 0 <= module.kv_index < len(group.layers):
            raise AnnaError(f"{name}: K/V index {module.kv_index} is outside cache group {g} "
                            f"({len(group.layers)} layers)")
        if (module.num_kv_heads, module.head_dim) != (group.num_kv_heads, group.head_dim):
            raise AnnaError(f"{name}: {module.num_kv_heads} KV heads of dim {module.head_dim}, but cache group {g} "
                            f"holds {group.num_kv_heads} of dim {group.head_dim}")
        window = group.window if isinstance(group, SlidingWindowSpec) else None
        if module.sliding_window != window:
            raise AnnaError(f"{name}: sliding_window {module.sliding_window}, but cache group {g} ({group.kind}) "
                            f"has window {window}")
