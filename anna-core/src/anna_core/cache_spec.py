"""What caches a model needs: a list of cache groups, each of one kind with its geometry and layers.

A model declares :class:`CacheSpec` ``groups``; the engine sizes, allocates and manages each group on
its own (:mod:`anna_core.engine.cache_manager`), and every per-group index is the group's position
in ``groups`` (``ModelCaches.groups[g]``, ``ForwardBatch.tables[g]``, ``ScheduledSeq.block_tables[g]``).

Kinds (after vLLM v1's KV-cache groups, kept smaller):

* :class:`FullAttentionSpec`: paged K/V blocks of ``block_size`` tokens, one block table per
  sequence covering its whole context, prefix-cached by hash chain.
* :class:`SlidingWindowSpec`: the same, but a sequence drops its references to blocks wholly behind
  the window, so it holds at most ``ceil(window / block_size) + 1`` of them between steps.
* :class:`RecurrentStateSpec`: a per-sequence state slot (conv state + float32 recurrent state),
  updated in place, with snapshots every ``snapshot_interval`` tokens for prefix hits. At most one
  recurrent group per model.

KV sharing: a layer listed in an attention group's ``shared`` reads the K/V of another layer of the
group (its *owner*) and owns no tensors; :meth:`FullAttentionSpec.cache_index` gives either layer the
index of the tensors it uses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import attrs

from anna_core.errors import AnnaError
from anna_core.kv_quant.layout import TurboQuantLayout

if TYPE_CHECKING:  # pure Python at import: the scheduler's bookkeeping reads these specs without torch
    import torch


def _as_tuple(value) -> tuple[int, ...]:
    return tuple(int(v) for v in value)


def _as_shared(value) -> tuple[tuple[int, int], ...]:
    items = value.items() if isinstance(value, Mapping) else value
    return tuple((int(a), int(b)) for a, b in items)


def _elem(dtype: torch.dtype) -> int:
    return dtype.itemsize


@attrs.frozen(kw_only=True)
class FullAttentionSpec:
    """Paged K/V of full-attention layers of one geometry.

    Attributes:
        layers: model layer ids that own K/V tensors in this group; layer ``layers[i]`` uses
            ``caches.groups[g].k[i]`` / ``.v[i]``, each ``[num_blocks + 1, block_size, num_kv_heads, head_dim]``.
        num_kv_heads: K/V heads per layer (per rank, once tensor parallelism splits them).
        head_dim: dimension of each head (K and V).
        shared: ``(reader, owner)`` layer-id pairs (a mapping is accepted): the reader attends over the
            owner's K/V and writes none of its own (KV sharing); owners are in ``layers``.
        dtype: cache dtype; None = the serving dtype (ignored when ``quant`` is set).
        quant: the quantized layout (:class:`~anna_core.kv_quant.layout.TurboQuantLayout`), or None: K/V rows
            stored as ``uint8`` ``[..., key_row_bytes]`` / ``[..., value_row_bytes]``, written by the
            ``turboquant_cache_write`` op and read by ``paged_attention_turboquant``. Models do not set it: the
            engine applies the server's choice (:meth:`CacheSpec.with_kv_quant`). Sizing goes through
            :meth:`bytes_per_block` only.

    Raises:
        AnnaError: no layer, a repeated layer, non-positive geometry, a reader listed twice, a reader
            whose owner is not in ``layers``, a quantized layout the head dim cannot take, or one with a residual
            ring where a layer other than the last of ``layers`` has readers (the rows it holds for them,
            :mod:`anna_core.kv_quant.residual`, would reach the ring after the group's last write of positions).
    """

    layers: tuple[int, ...] = attrs.field(converter=_as_tuple)
    num_kv_heads: int
    head_dim: int
    shared: tuple[tuple[int, int], ...] = attrs.field(default=(), converter=_as_shared)
    dtype: torch.dtype | None = None
    quant: TurboQuantLayout | None = None

    kind = "full_attention"

    def __attrs_post_init__(self) -> None:
        if not self.layers or len(set(self.layers)) != len(self.layers):
            raise AnnaError(f"an attention cache group needs distinct layers, got {list(self.layers)}")
        if self.num_kv_heads < 1 or self.head_dim < 1:
            raise AnnaError(f"num_kv_heads and head_dim must be positive, got {self.num_kv_heads}, {self.head_dim}")
        readers = [r for r, _ in self.shared]
        if len(set(readers)) != len(readers):
            raise AnnaError(f"a layer reads two layers' K/V: {sorted(readers)}")
        for reader, owner in self.shared:
            if owner not in self.layers or reader in self.layers:
                raise AnnaError(f"layer {reader} reads layer {owner}'s K/V: the owner must own tensors in the "
                                f"group ({list(self.layers)}) and the reader must not")
        if self.quant is not None:
            self.quant.check_head_dim(self.head_dim)
            owners = {owner for _, owner in self.shared}
            if self.quant.residual_len and owners - {self.layers[-1]}:
                raise AnnaError(f"layers {sorted(owners - {self.layers[-1]})} have readers (KV sharing) but are not "
                                f"the group's last owning layer ({self.layers[-1]}): a residual ring "
                                f"(--kv-cache-residual-len) takes readers of the last one only")

    def cache_index(self, layer: int) -> int:
        """The index into the group's ``k`` / ``v`` lists of the tensors ``layer`` uses (its own, or
        its owner's when it shares them).

        Raises:
            AnnaError: ``layer`` is not in the group.
        """
        owner = dict(self.shared).get(layer, layer)
        try:
            return self.layers.index(owner)
        except ValueError:
            raise AnnaError(f"layer {layer} has no K/V in this cache group (layers {list(self.layers)})") from None

    def row_bytes(self, dtype: torch.dtype) -> tuple[int, int]:
        """Bytes of one token's K row and V row of one head: the quantized layout's, else ``head_dim`` elements
        of ``self.dtype or dtype``."""
        if self.quant is not None:
            return self.quant.key_row_bytes(self.head_dim), self.quant.value_row_bytes(self.head_dim)
        row = self.head_dim * _elem(self.dtype or dtype)
        return row, row

    def bytes_per_block(self, block_size: int, dtype: torch.dtype) -> int:
        """Bytes of one block over the group's owning layers (K and V): :meth:`row_bytes` per token and head."""
        return len(self.layers) * block_size * self.num_kv_heads * sum(self.row_bytes(dtype))

    def residual_bytes_per_slot(self, dtype: torch.dtype) -> int:
        """Bytes of one sequence slot's residual ring (``quant.residual_len`` K and V rows per owning layer in the
        serving dtype, plus their int32 positions); 0 without a quantized layout or residual."""
        n = 0 if self.quant is None else self.quant.residual_len
        return n * (2 * len(self.layers) * self.num_kv_heads * self.head_dim * _elem(dtype) + 4)

    def max_blocks_per_seq(self, num_tokens: int, block_size: int) -> int:
        """Blocks one sequence of ``num_tokens`` tokens holds at most between steps."""
        return -(-num_tokens // block_size)


@attrs.frozen(kw_only=True)
class SlidingWindowSpec(FullAttentionSpec):
    """Paged K/V of sliding-window layers: query at position ``p`` attends to ``p - window + 1 .. p``.

    Attributes:
        window: the window in tokens, the query's own position included (as the ``paged_attention``
            op's ``sliding_window``).

    Raises:
        AnnaError: as :class:`FullAttentionSpec`, or a non-positive window.
    """

    window: int

    kind = "sliding_window"

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        if self.window < 1:
            raise AnnaError(f"a sliding window must be positive, got {self.window}")

    def max_blocks_per_seq(self, num_tokens: int, block_size: int) -> int:
        """``min(ceil(num_tokens / block_size), ceil(window / block_size) + 1)``."""
        return min(-(-num_tokens // block_size), -(-self.window // block_size) + 1)

    def first_needed_block(self, position: int, block_size: int) -> int:
        """The first block a query at ``position`` reads (blocks before it are wholly behind the window)."""
        return max(0, position - self.window + 1) // block_size


@attrs.frozen(kw_only=True)
class RecurrentStateSpec:
    """Per-sequence state of recurrent (gated DeltaNet) layers.

    Attributes:
        layers: model layer ids with state in this group; layer ``layers[i]`` uses
            ``caches.groups[g].conv[i]`` ``[num_slots + 1, C, W-1]`` (serving dtype) and
            ``.recurrent[i]`` ``[num_slots + 1, H_v, K, V]`` float32.
        conv_shape: per-slot conv state ``(C, W-1)``.
        state_shape: per-slot recurrent state ``(H_v, K, V)``.

    Raises:
        AnnaError: no layer or a non-positive shape.
    """

    layers: tuple[int, ...] = attrs.field(converter=_as_tuple)
    conv_shape: tuple[int, int] = attrs.field(converter=_as_tuple)
    state_shape: tuple[int, int, int] = attrs.field(converter=_as_tuple)

    kind = "recurrent"

    def __attrs_post_init__(self) -> None:
        if not self.layers or len(set(self.layers)) != len(self.layers):
            raise AnnaError(f"a recurrent cache group needs distinct layers, got {list(self.layers)}")
        if len(self.conv_shape) != 2 or len(self.state_shape) != 3 or min(*self.conv_shape, *self.state_shape) < 1:
            raise AnnaError(f"bad recurrent state shapes {self.conv_shape}, {self.state_shape}")

    def cache_index(self, layer: int) -> int:
        """The index into the group's ``conv`` / ``recurrent`` lists of ``layer``'s state.

        Raises:
            AnnaError: ``layer`` is not in the group.
        """
        try:
            return self.layers.index(layer)
        except ValueError:
            raise AnnaError(f"layer {layer} has no state in this cache group (layers {list(self.layers)})") from None

    def bytes_per_slot(self, dtype: torch.dtype) -> int:
        """Bytes of one sequence's state over the group's layers (conv in ``dtype``, recurrent float32)."""
        c, w = self.conv_shape
        h, k, v = self.state_shape
        return len(self.layers) * (c * w * _elem(dtype) + h * k * v * 4)


CacheGroupSpec = FullAttentionSpec | SlidingWindowSpec | RecurrentStateSpec


def _readers(group: CacheGroupSpec) -> list[int]:
    return [r for r, _ in group.shared] if isinstance(group, FullAttentionSpec) else []


def _as_groups(value) -> tuple:
    return tuple(value)


@attrs.frozen
class CacheSpec:
    """A model's cache groups (may be empty: a model with no cache).

    Raises:
        AnnaError: more than one recurrent group, or a layer in two groups.
    """

    groups: tuple[CacheGroupSpec, ...] = attrs.field(default=(), converter=_as_groups)

    def __attrs_post_init__(self) -> None:
        if sum(isinstance(g, RecurrentStateSpec) for g in self.groups) > 1:
            raise AnnaError("a model may declare at most one recurrent cache group")
        seen: set[int] = set()
        for g in self.groups:
            ids = set(g.layers) | set(_readers(g))
            if seen & ids:
                raise AnnaError(f"layers {sorted(seen & ids)} are in two cache groups")
            seen |= ids

    @property
    def attention_groups(self) -> list[int]:
        """Indices of the paged (full and sliding-window) groups."""
        return [i for i, g in enumerate(self.groups) if isinstance(g, FullAttentionSpec)]

    @property
    def state_group(self) -> int | None:
        """Index of the recurrent group, or None."""
        return next((i for i, g in enumerate(self.groups) if isinstance(g, RecurrentStateSpec)), None)

    @property
    def recurrent(self) -> RecurrentStateSpec | None:
        """The recurrent group's spec, or None."""
        g = self.state_group
        return None if g is None else self.groups[g]

    def with_kv_quant(self, layout: TurboQuantLayout | None) -> CacheSpec:
        """This spec with every attention group (full and sliding-window) quantized by ``layout`` (None: as
        declared); the recurrent group is unchanged (a hybrid model quantizes its attention layers only).

        Raises:
            AnnaError: a group's head dim the layout cannot take.
        """
        if layout is None:
            return self
        return CacheSpec(tuple(attrs.evolve(g, quant=layout) if isinstance(g, FullAttentionSpec) else g
                               for g in self.groups))

    def group_of(self, layer: int) -> int:
        """The index of the group holding ``layer``'s cache (as owner or reader).

        Raises:
            AnnaError: no group holds it.
        """
        for i, g in enumerate(self.groups):
            if layer in g.layers or layer in _readers(g):
                return i
        raise AnnaError(f"no cache group holds layer {layer}")
