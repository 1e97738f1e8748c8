"""Device storage behind the state snapshots and the prompt cache, and the copies in and out.

The bookkeeping (which key lives at which index) is pure Python in
:mod:`anna_core.engine.state_snapshots`; this module owns the tensors. All copies are batched
``index_select`` / ``index_copy_`` on the caches' device, queued on the same stream as the forward
pass (no host sync).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from anna_core.engine.sampler import host_tensor
from anna_core.kv_quant.residual import ResidualRing
from anna_core.model import CacheSpec, ModelCaches


class StateStore:
    """``capacity`` copies of one sequence's recurrent state (every layer of the recurrent group), plus logits, and
    with ``residual`` its TurboQuant residual rings.

    Per recurrent layer: ``conv`` ``[capacity, C, W-1]`` in ``dtype`` and ``recurrent``
    ``[capacity, H_v, K, V]`` float32, like the slot pools of :class:`~anna_core.model.StateCache`.
    ``logits[i]`` (``[V]`` float32) is kept for prompt-cache entries. ``rings`` (``residual``): per attention group
    with a residual ring (``--kv-cache-residual-len``), a :class:`~anna_core.kv_quant.residual.ResidualRing` of
    ``capacity`` entries, copied with the states: a prompt-cache hit computes nothing, so its slot's ring is the one
    its prompt left.

    Args:
        spec: the model's cache spec (no tensors without a recurrent group or rings).
        capacity: entries.
        device / dtype: where and in which dtype the conv states (and ring rows) live.
        residual: also keep the rings.
    """

    def __init__(self, spec: CacheSpec, capacity: int, device: torch.device, dtype: torch.dtype, *,
                 residual: bool = False):
        self.capacity = capacity
        self.device = device
        self.conv: list[torch.Tensor] = []
        self.recurrent: list[torch.Tensor] = []
        rec = spec.recurrent
        if rec is not None and capacity > 0:
            self.conv = [torch.zeros((capacity, *rec.conv_shape), dtype=dtype, device=device) for _ in rec.layers]
            self.recurrent = [torch.zeros((capacity, *rec.state_shape), dtype=torch.float32, device=device)
                              for _ in rec.layers]
        self.logits: dict[int, torch.Tensor] = {}
        self.rings: dict[int, ResidualRing] = {}
        for g in spec.attention_groups if residual and capacity > 0 else ():
            group = spec.groups[g]
            if group.quant is not None and group.quant.residual_len:
                self.rings[g] = ResidualRing.empty(len(group.layers), capacity, group.quant.residual_len,
                                                   group.num_kv_heads, group.head_dim, device, dtype)

    def _pairs(self, caches: ModelCaches) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """``(store tensor, the caches' slot pool)`` of every state and ring tensor kept."""
        pools = [t for group in caches.state_caches for t in group.conv + group.recurrent]
        pairs = list(zip(self.conv + self.recurrent, pools))
        for g, ring in self.rings.items():
            live = caches.attention(g).residual
            pairs += zip([*ring.k, *ring.v, ring.pos], [*live.k, *live.v, live.pos])
        return pairs

    def save(self, caches: ModelCaches, slots: Sequence[int], indices: Sequence[int]) -> None:
        """Copy the states (and rings) of ``slots`` (the caches' slot pools) into entries ``indices``."""
        if not (self.conv or self.rings) or not slots:
            return
        src = host_tensor(list(slots), torch.int64, self.device)
        dst = host_tensor(list(indices), torch.int64, self.device)
        for store, pool in self._pairs(caches):
            store.index_copy_(0, dst, pool.index_select(0, src))

    def load(self, caches: ModelCaches, indices: Sequence[int], slots: Sequence[int]) -> None:
        """Copy entries ``indices`` into the caches' state slots ``slots`` (and their rings)."""
        if not (self.conv or self.rings) or not slots:
            return
        src = host_tensor(list(indices), torch.int64, self.device)
        dst = host_tensor(list(slots), torch.int64, self.device)
        for store, pool in self._pairs(caches):
            pool.index_copy_(0, dst, store.index_select(0, src))


def copy_blocks(caches: ModelCaches, copies: Sequence[tuple[int, int, int]]) -> None:
    """Copy K and V block ``src`` to block ``dst`` in every layer of attention group ``g``, for each
    ``(g, src, dst)`` of ``copies``."""
    by_group: dict[int, tuple[list[int], list[int]]] = {}
    for g, src, dst in copies:
        pair = by_group.setdefault(g, ([], []))
        pair[0].append(src)
        pair[1].append(dst)
    for g, (src, dst) in by_group.items():
        group = caches.attention(g)
        device = group.k[0].device
        s = host_tensor(src, torch.int64, device)
        d = host_tensor(dst, torch.int64, device)
        for t in group.k + group.v:
            t.index_copy_(0, d, t.index_select(0, s))
