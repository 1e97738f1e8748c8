"""Bookkeeping of recurrent-state snapshots and of the prompt cache (pure Python).

A prefix-cache hit of a model with a recurrent cache group needs, besides the KV blocks, the conv and
recurrent state at the point where the computation resumes. States are large (tens of MiB per
sequence at real shapes), so they are copied into a separate pool only every
``snapshot_interval`` tokens; :class:`SnapshotIndex` maps the prefix key (the chain key of the
block that ends at the snapshot position) to a pool index, with LRU eviction.

:class:`PromptCache` keeps the N most recent exact prompts: a state-pool index (final state and
last logits), and the prompt's KV blocks, pinned.
"""

from __future__ import annotations

from collections import OrderedDict

import attrs


class SnapshotIndex:
    """Prefix key -> index into a pool of ``capacity`` state snapshots, least recently used evicted.

    A snapshot taken inside a prefill pass (:mod:`anna_core.layers.state_checkpoints`) is reserved when
    the step is scheduled and written while it runs: it stays *pending* (invisible to :meth:`get`,
    never evicted) until :meth:`commit` after the step, or :meth:`release` when the step failed.

    Args:
        capacity: snapshots in the pool (0 disables snapshots).
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._index: OrderedDict[bytes, int] = OrderedDict()
        self._pending: dict[bytes, int] = {}
        self._free = list(range(capacity - 1, -1, -1))

    def __len__(self) -> int:
        return len(self._index)

    @property
    def num_pending(self) -> int:
        return len(self._pending)

    def get(self, key: bytes) -> int | None:
        """The pool index holding the state after the prefix ``key`` (marks it recently used)."""
        idx = self._index.get(key)
        if idx is not None:
            self._index.move_to_end(key)
        return idx

    def reserve(self, key: bytes, pending: bool = False) -> int | None:
        """A pool index to copy the state of prefix ``key`` into, or None when ``key`` is held
        already (then it is marked recently used) or the pool has no room at all. With ``pending`` the
        entry stays invisible until :meth:`commit`."""
        if key in self._pending:
            return None
        if key in self._index:
            self._index.move_to_end(key)
            return None
        if self._free:
            idx = self._free.pop()
        elif self._index:
            _, idx = self._index.popitem(last=False)
        else:
            return None
        if pending:
            self._pending[key] = idx
        else:
            self._index[key] = idx
        return idx

    def commit(self, key: bytes) -> None:
        """Make the pending entry of ``key`` visible (its state is written); no-op when not pending."""
        idx = self._pending.pop(key, None)
        if idx is not None:
            self._index[key] = idx

    def release(self, key: bytes) -> None:
        """Drop the pending entry of ``key`` (its step failed); no-op when not pending."""
        idx = self._pending.pop(key, None)
        if idx is not None:
            self._free.append(idx)


@attrs.define
class PromptEntry:
    """One cached prompt.

    Attributes:
        store_idx: index of its final state and last-row logits in the prompt store.
        blocks: per cache group, the blocks covering the prompt (pinned while the entry lives; only the
            window before the prompt's end in sliding-window groups, null entries before it).
        num_tokens: prompt length.
    """

    store_idx: int
    blocks: list[list[int]]
    num_tokens: int


class PromptCache:
    """The ``capacity`` most recent exact prompts (token-id tuples), least recently used evicted.

    Eviction hands the entry back to the caller, who unpins its blocks.
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._entries: OrderedDict[tuple[int, ...], PromptEntry] = OrderedDict()
        self._free = list(range(capacity - 1, -1, -1))

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: tuple[int, ...]) -> bool:
        return key in self._entries

    def get(self, key: tuple[int, ...]) -> PromptEntry | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def insert(self, key: tuple[int, ...], blocks: list[list[int]]) -> tuple[PromptEntry, PromptEntry | None]:
        """Add ``key`` (not present) with its ``blocks``; returns (the entry, the evicted entry or None).

        The caller pins ``blocks`` and unpins the evicted entry's blocks.
        """
        evicted = None
        if not self._free:
            _, evicted = self._entries.popitem(last=False)
            self._free.append(evicted.store_idx)
        entry = PromptEntry(self._free.pop(), list(blocks), len(key))
        self._entries[key] = entry
        return entry, evicted

    def remove(self, key: tuple[int, ...]) -> PromptEntry | None:
        """Drop ``key``'s entry (the caller unpins its blocks); None if absent."""
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._free.append(entry.store_idx)
        return entry

    def pop_lru(self) -> PromptEntry | None:
        """Drop the least recently used entry (to reclaim its blocks); None if empty."""
        if not self._entries:
            return None
        _, entry = self._entries.popitem(last=False)
        self._free.append(entry.store_idx)
        return entry
