"""The scheduler's view of every cache group: allocation, release, prefix hits (pure Python, no torch).

One :class:`~anna_core.engine.block_manager.BlockManager` per attention group (its own pool, since the
geometries differ), one :class:`~anna_core.engine.state_pool.StatePool` of per-sequence slots (the
recurrent group's state; every sequence has a slot) and the recurrent group's
:class:`~anna_core.engine.state_snapshots.SnapshotIndex`. Every attention group uses the same block size
and the same hash chain (:mod:`anna_core.engine.prefix_cache`), so block ``i`` of a sequence has one key
in all groups.

What each kind contributes:

* full attention: a table covering the whole context; a prefix hit can resume at any block it has
  cached, up to the longest cached prefix.
* sliding window: after a step that computed up to ``end`` tokens, references to blocks wholly behind
  the next query's window (:meth:`~anna_core.cache_spec.SlidingWindowSpec.first_needed_block`) are dropped
  (:meth:`BlockManager.drop_before`); dropped blocks stay in the prefix cache as evictable. A hit can
  resume at point ``p`` when the blocks of the window before ``p`` are cached.
* recurrent: a hit can resume at ``p`` only when a state snapshot at ``p`` exists (a multiple of
  ``snapshot_interval``).

A prefix hit resumes at the largest point every group can serve (:meth:`CacheManager.prefix_hit`), leaving
at least a TurboQuant residual ring's length of the request to compute.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from anna_core.cache_spec import CacheSpec, SlidingWindowSpec
from anna_core.engine.block_manager import BlockManager, blocks_for
from anna_core.engine.request import Request
from anna_core.engine.state_pool import StatePool
from anna_core.engine.state_snapshots import SnapshotIndex
from anna_core.errors import AnnaError


@attrs.define
class PrefixHit:
    """Where a prefix-cache hit resumes.

    Attributes:
        num_tokens: cached tokens (0: a miss); a multiple of the block size.
        shared: per cache group, the blocks the sequence's table starts with (null entries behind a
            sliding window; empty for the recurrent group and on a miss).
        snapshot: snapshot-pool index of the recurrent state at ``num_tokens``, or None.
    """

    num_tokens: int
    shared: list[list[int]]
    snapshot: int | None = None


class CacheManager:
    """Every cache group's bookkeeping, asked by the scheduler.

    Args:
        spec: the model's cache groups.
        num_blocks: blocks per attention group, in ``spec.attention_groups`` order (or one count for all).
        block_size: tokens per block.
        num_slots: state slots (the engine's ``max_num_seqs``).
        enable_caching: keep computed blocks for prefix hits (ignored, i.e. off, for a model without
            cache groups, or with a recurrent group but no snapshot: a hit would have nothing to resume from).
        num_snapshots: recurrent-state snapshots (models with a recurrent group).
        snapshot_interval: tokens between snapshot boundaries.

    Raises:
        AnnaError: bad counts.
    """

    def __init__(self, spec: CacheSpec, num_blocks: int | Sequence[int], block_size: int, num_slots: int, *,
                 enable_caching: bool = False, num_snapshots: int = 0, snapshot_interval: int = 256):
        counts = [num_blocks] * len(spec.attention_groups) if isinstance(num_blocks, int) else list(num_blocks)
        if len(counts) != len(spec.attention_groups):
            raise AnnaError(f"{len(counts)} block counts for {len(spec.attention_groups)} attention groups")
        self.spec = spec
        self.block_size = block_size
        self.has_state = spec.recurrent is not None
        self.snapshots = SnapshotIndex(num_snapshots if self.has_state else 0)
        self.snapshot_interval = snapshot_interval
        # a model without caches has nothing a hit could resume from; one with a recurrent group needs snapshots
        self.enable_caching = (enable_caching and bool(spec.groups)
                               and (not self.has_state or self.snapshots.capacity > 0))
        self.groups: list[BlockManager | None] = [None] * len(spec.groups)
        for g, n in zip(spec.attention_groups, counts):
            self.groups[g] = BlockManager(n, block_size, enable_caching=self.enable_caching)
        self.paged = [(g, spec.groups[g], self.groups[g]) for g in spec.attention_groups]
        self.slots = StatePool(num_slots)
        # a hit leaves a TurboQuant group's residual ring (--kv-cache-residual-len) its newest positions to compute
        self.residual_len = max((spec.groups[g].quant.residual_len for g in spec.attention_groups
                                 if spec.groups[g].quant is not None), default=0)
        # the recurrent group's snapshots are taken (and chunks planned around them) only when hits can use them
        self.capture_snapshots = self.has_state and self.enable_caching

    # -- counts -------------------------------------------------------------------------------

    @property
    def num_blocks(self) -> int:
        """Blocks of every attention group together."""
        return sum(bm.num_blocks for _, _, bm in self.paged)

    @property
    def num_used_blocks(self) -> int:
        return sum(bm.num_used_blocks for _, _, bm in self.paged)

    @property
    def num_cached_blocks(self) -> int:
        return sum(bm.num_cached_blocks for _, _, bm in self.paged)

    def free_fraction(self) -> float:
        """The tightest attention group's free share of its blocks (1.0 without attention groups)."""
        return min((bm.num_free_blocks / bm.num_blocks for _, _, bm in self.paged), default=1.0)

    def chunk_room(self, num_running: int) -> int:
        """Prefill tokens the tightest attention group can take while leaving a free block per running
        sequence (at least one block; unbounded without attention groups)."""
        bs = self.block_size
        return min((max(bs, (bm.num_free_blocks - num_running) * bs) for _, _, bm in self.paged), default=1 << 62)

    def group_stats(self) -> list[dict]:
        """Per attention group: kind, blocks used / total / cached, and a quantized group's layout (for ``/healthz``)."""
        return [{"group": g, "kind": spec.kind, "blocks_used": bm.num_used_blocks, "blocks_total": bm.num_blocks,
                 "cached_blocks": bm.num_cached_blocks,
                 **({} if spec.quant is None else {"kv_quant": {"method": "turboquant", "bits": spec.quant.bits,
                                                                "residual_len": spec.quant.residual_len,
                                                                "key_qjl": spec.quant.key_qjl}})}
                for g, spec, bm in self.paged]

    def report(self) -> dict[str, Any]:
        """For ``/healthz``: ``paged_kv`` (attention K/V live in paged blocks of ``block_size`` tokens; False for a
        model with recurrent state only), ``block_size``, ``prefix_caching`` (on as served), KV blocks used / total
        / cached (all attention groups), ``cache_groups`` (:meth:`group_stats`), state slots used / total."""
        return {"paged_kv": bool(self.paged), "block_size": self.block_size, "prefix_caching": self.enable_caching,
                "kv_blocks_used": self.num_used_blocks, "kv_blocks_total": self.num_blocks,
                "cached_blocks": self.num_cached_blocks, "cache_groups": self.group_stats(),
                "state_slots_used": self.slots.num_used_slots, "state_slots_total": self.slots.num_slots}

    # -- per sequence -------------------------------------------------------------------------

    def tables(self, seq_id: str) -> list[list[int]]:
        """Copies of ``seq_id``'s block tables, one per cache group (empty for the recurrent group)."""
        return [list(bm.table(seq_id)) if bm is not None else [] for bm in self.groups]

    def can_allocate(self, seq_id: str, num_tokens: int) -> bool:
        """Whether every attention group can grow ``seq_id``'s table to ``num_tokens`` tokens."""
        return all(bm.can_allocate(seq_id, num_tokens) for _, _, bm in self.paged)

    def allocate(self, seq_id: str, num_tokens: int) -> list[list[int]]:
        """Grow ``seq_id``'s tables to ``num_tokens`` tokens; returns copies of them (see :meth:`tables`).

        Raises:
            AnnaError: a group is out of blocks (check :meth:`can_allocate` first).
        """
        for _, _, bm in self.paged:
            bm.allocate(seq_id, num_tokens)
        return self.tables(seq_id)

    def computed(self, seq_id: str, end: int) -> None:
        """``seq_id`` has its first ``end`` tokens computed: sliding-window groups drop the blocks wholly
        behind the window of the next query (position ``end``)."""
        for _, spec, bm in self.paged:
            if isinstance(spec, SlidingWindowSpec):
                bm.drop_before(seq_id, spec.first_needed_block(end, self.block_size))

    def free(self, seq_id: str) -> None:
        """Release every block and the slot of ``seq_id``."""
        for _, _, bm in self.paged:
            bm.free(seq_id)
        self.slots.free(seq_id)

    def register(self, seq_id: str, hashes: list[bytes], first: int, last: int) -> None:
        """Register ``seq_id``'s computed full blocks ``first .. last-1`` under ``hashes`` in every group."""
        for _, _, bm in self.paged:
            table = bm.table(seq_id)
            for i in range(first, last):
                if table[i] != bm.null_block:
                    bm.register(table[i], hashes[i])

    # -- prefix hits --------------------------------------------------------------------------

    def miss(self) -> PrefixHit:
        return PrefixHit(0, [[] for _ in self.groups])

    def prefix_hit(self, request: Request) -> PrefixHit:
        """The largest point every group can resume ``request`` from (at least one token is left to
        compute, for the logits; with a residual ring of ``R`` positions, :mod:`anna_core.kv_quant.residual`, at
        least ``R``: the ring then holds the newest ``R`` positions as a miss's does, computed by this request,
        instead of reading cached positions among them quantized); a hit marks the snapshot recently used."""
        if not self.enable_caching:
            return self.miss()
        bs = self.block_size
        limit = max(0, request.num_tokens - max(1, self.residual_len)) // bs
        hashes = request.hashes_upto(limit, bs)
        bound = limit
        full: dict[int, list[int]] = {}
        for g, spec, bm in self.paged:
            if not isinstance(spec, SlidingWindowSpec):
                full[g] = bm.lookup(hashes[:limit])
                bound = min(bound, len(full[g]))
        step = self.snapshot_interval // bs if self.has_state else 1
        for k in range(bound // step * step, 0, -step):
            shared = self._shared_at(k, hashes, full)
            if shared is None:
                continue
            snapshot = None
            if self.has_state:
                snapshot = self.snapshots.get(hashes[k - 1])
                if snapshot is None:
                    continue
            return PrefixHit(k * bs, shared, snapshot)
        return self.miss()

    def _shared_at(self, k: int, hashes: list[bytes], full: dict[int, list[int]]) -> list[list[int]] | None:
        """Per group, the table a hit resuming at block ``k`` starts with; None when a sliding-window
        group lacks a block of the window before it."""
        shared: list[list[int]] = [[] for _ in self.groups]
        for g, spec, bm in self.paged:
            if g in full:
                shared[g] = full[g][:k]
                continue
            first = spec.first_needed_block(k * self.block_size, self.block_size)
            window = []
            for h in hashes[first:k]:
                block = bm.cached_block(h)
                if block is None:
                    return None
                window.append(block)
            shared[g] = [bm.null_block] * first + window
        return shared

    def fits(self, shared: list[list[int]], num_tokens: int) -> bool:
        """Whether a sequence starting with ``shared`` tables can grow them to ``num_tokens`` tokens."""
        for g, _, bm in self.paged:
            new = blocks_for(num_tokens, self.block_size) - len(shared[g])
            if new + bm.num_evictable_among(shared[g]) > bm.num_free_blocks:
                return False
        return True

    def share(self, seq_id: str, shared: list[list[int]]) -> None:
        """Start ``seq_id``'s tables with ``shared`` (a hit)."""
        for g, _, bm in self.paged:
            if shared[g]:
                bm.share(seq_id, shared[g])

    # -- prompt-cache entries -----------------------------------------------------------------

    def entry_blocks(self, seq_id: str, num_tokens: int) -> list[list[int]]:
        """Per group, the blocks a prompt-cache entry of ``seq_id``'s first ``num_tokens`` tokens keeps
        (only the window before the prompt's end in sliding-window groups)."""
        n = blocks_for(num_tokens, self.block_size)
        out: list[list[int]] = [[] for _ in self.groups]
        for g, spec, bm in self.paged:
            table = list(bm.table(seq_id)[:n])
            if isinstance(spec, SlidingWindowSpec):
                first = spec.first_needed_block(num_tokens, self.block_size)
                table = [bm.null_block] * first + table[first:]
            out[g] = table
        return out

    def pin(self, blocks: list[list[int]]) -> None:
        for g, _, bm in self.paged:
            bm.pin(blocks[g])

    def unpin(self, blocks: list[list[int]]) -> None:
        for g, _, bm in self.paged:
            bm.unpin(blocks[g])

    def prompt_hit_fits(self, num_tokens: int) -> bool:
        """Whether every group has the free block a prompt hit of ``num_tokens`` tokens needs when the
        prompt ends inside a block (its own copy of the entry's last block)."""
        tail = num_tokens % self.block_size != 0
        return all(int(tail) <= bm.num_free_blocks for _, _, bm in self.paged)

    def share_prompt(self, seq_id: str, entry_blocks: list[list[int]],
                     num_tokens: int) -> tuple[list[list[int]], list[tuple[int, int, int]]]:
        """Start ``seq_id``'s tables from a prompt-cache entry: its full blocks shared, a block of its own
        for a prompt that ends inside one. Returns (the tables, ``(group, source, destination)`` of each
        tail block the engine copies)."""
        tail = num_tokens % self.block_size != 0
        copies = []
        for g, _, bm in self.paged:
            blocks = entry_blocks[g]
            bm.share(seq_id, blocks[:-1] if tail else blocks)
            if tail:
                table = bm.allocate(seq_id, num_tokens)
                copies.append((g, blocks[-1], table[-1]))
        return self.tables(seq_id), copies
