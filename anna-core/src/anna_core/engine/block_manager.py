"""Paged KV-cache bookkeeping: free list, ref counts, a block table per sequence and the prefix cache.

Pure Python (no torch): the engine turns the block tables into index tensors.

A block is *referenced* by the sequences whose tables hold it and *pinned* by prompt-cache
entries. With prefix caching on, a full block whose K/V are computed is registered under its
hash-chain key (:mod:`anna_core.engine.prefix_cache`); when nothing references or pins it any more
it stays in the cache, *evictable*, and a later sequence with the same prefix can share it.
Allocation takes never-used blocks first, then evicts the least recently released cached block.

A table is indexed by ``position // block_size``. An entry a sequence no longer holds (a block wholly
behind a sliding window, :meth:`BlockManager.drop_before`) is the *null block* ``num_blocks``, the
cache's scratch block: never handed out, never referenced, and read only under an attention mask.
"""

from __future__ import annotations

from collections import OrderedDict, deque

from anna_core.errors import AnnaError


def blocks_for(num_tokens: int, block_size: int) -> int:
    """Blocks needed to hold ``num_tokens`` tokens (ceil division)."""
    return -(-num_tokens // block_size)


class BlockManager:
    """Hands out KV blocks ``0 .. num_blocks-1`` and tracks which sequence holds which.

    Sequence ``s``'s token at position ``p`` lives in block ``table(s)[p // block_size]`` at offset
    ``p % block_size``.

    Args:
        num_blocks: blocks in the cache.
        block_size: tokens per block.
        enable_caching: keep released full blocks in the prefix cache (see module doc).
    """

    def __init__(self, num_blocks: int, block_size: int, enable_caching: bool = False):
        if num_blocks < 1 or block_size < 1:
            raise AnnaError(f"need num_blocks >= 1 and block_size >= 1, got {num_blocks}, {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.null_block = num_blocks
        self._free: deque[int] = deque(range(num_blocks))
        self._seq_refs = [0] * num_blocks
        self._pins = [0] * num_blocks
        self._num_seq_used = 0
        self._tables: dict[str, list[int]] = {}
        self._hash_of: dict[int, bytes] = {}
        self._by_hash: dict[bytes, int] = {}
        self._evictable: OrderedDict[int, None] = OrderedDict()  # cached, unreferenced; oldest first

    # -- counts -------------------------------------------------------------------------------

    @property
    def num_free_blocks(self) -> int:
        """Blocks an allocation can take now (never used, or cached and unreferenced)."""
        return len(self._free) + len(self._evictable)

    @property
    def num_used_blocks(self) -> int:
        """Blocks held by at least one sequence (pinned-only and cached blocks do not count)."""
        return self._num_seq_used

    @property
    def num_cached_blocks(self) -> int:
        """Blocks registered in the prefix cache (referenced or not)."""
        return len(self._by_hash)

    def num_evictable_among(self, blocks: list[int]) -> int:
        """How many of ``blocks`` are cached and unreferenced (sharing them takes them off the free count)."""
        return sum(1 for b in blocks if b in self._evictable)

    def num_held(self, seq_id: str) -> int:
        """Blocks ``seq_id`` references (its table's entries other than the null block)."""
        return sum(1 for b in self.table(seq_id) if b != self.null_block)

    def ref_count(self, block: int) -> int:
        """Sequences plus prompt-cache entries holding ``block``."""
        return self._seq_refs[block] + self._pins[block]

    # -- tables -------------------------------------------------------------------------------

    def table(self, seq_id: str) -> list[int]:
        """The block table of ``seq_id`` (empty if it holds none). Do not mutate it."""
        return self._tables.get(seq_id, [])

    def blocks_needed(self, seq_id: str, num_tokens: int) -> int:
        """Extra blocks ``seq_id`` needs so that its table covers ``num_tokens`` tokens."""
        return max(0, blocks_for(num_tokens, self.block_size) - len(self.table(seq_id)))

    def can_allocate(self, seq_id: str, num_tokens: int) -> bool:
        return self.blocks_needed(seq_id, num_tokens) <= self.num_free_blocks

    def allocate(self, seq_id: str, num_tokens: int) -> list[int]:
        """Grow ``seq_id``'s table to cover ``num_tokens`` tokens; returns the table.

        Raises:
            AnnaError: not enough free blocks (call :meth:`can_allocate` first).
        """
        need = self.blocks_needed(seq_id, num_tokens)
        if need > self.num_free_blocks:
            raise AnnaError(f"out of KV blocks: {seq_id!r} needs {need}, {self.num_free_blocks} free")
        table = self._tables.setdefault(seq_id, [])
        for _ in range(need):
            block = self._take()
            self._ref(block)
            table.append(block)
        return table

    def share(self, seq_id: str, blocks: list[int]) -> list[int]:
        """Start ``seq_id``'s (empty) table with existing ``blocks`` (a cache hit; entries may be the null
        block, which is not referenced); returns the table.

        Raises:
            AnnaError: ``seq_id`` already holds blocks.
        """
        if self.table(seq_id):
            raise AnnaError(f"{seq_id!r} already holds blocks; shared blocks must start its table")
        for block in blocks:
            if block == self.null_block:
                continue
            self._evictable.pop(block, None)
            self._ref(block)
        self._tables[seq_id] = list(blocks)
        return self._tables[seq_id]

    def free(self, seq_id: str) -> None:
        """Release every block of ``seq_id`` (a no-op if it holds none)."""
        for block in reversed(self._tables.pop(seq_id, [])):
            if block != self.null_block:
                self._unref(block)

    def drop_before(self, seq_id: str, num_blocks: int) -> int:
        """Release ``seq_id``'s references to its first ``num_blocks`` table entries (blocks wholly behind
        a sliding window); they become null entries, and a cached one stays in the prefix cache as
        evictable. Returns how many were released."""
        table = self._tables.get(seq_id, [])
        dropped = 0
        for i in range(min(num_blocks, len(table))):
            if table[i] != self.null_block:
                block, table[i] = table[i], self.null_block
                self._unref(block)
                dropped += 1
        return dropped

    def pin(self, blocks: list[int]) -> None:
        """Hold ``blocks`` for a prompt-cache entry (they must be in use; null entries are skipped)."""
        for block in blocks:
            if block == self.null_block:
                continue
            if self.ref_count(block) == 0:
                raise AnnaError(f"cannot pin free block {block}")
            self._pins[block] += 1

    def unpin(self, blocks: list[int]) -> None:
        for block in blocks:
            if block == self.null_block:
                continue
            self._pins[block] -= 1
            self._maybe_release(block)

    # -- prefix cache -------------------------------------------------------------------------

    def register(self, block: int, block_hash: bytes) -> None:
        """Record that ``block`` (full, K/V computed) holds the tokens keyed by ``block_hash``.

        A no-op without caching, or when the hash or the block is registered already (an equal
        block computed twice stays private to its sequence).
        """
        if self.enable_caching and block_hash not in self._by_hash and block not in self._hash_of:
            self._by_hash[block_hash] = block
            self._hash_of[block] = block_hash

    def cached_block(self, block_hash: bytes) -> int | None:
        """The block registered under ``block_hash``, or None."""
        return self._by_hash.get(block_hash)

    def lookup(self, hashes: list[bytes]) -> list[int]:
        """The cached blocks of the longest prefix of ``hashes`` found in the cache."""
        found = []
        for h in hashes:
            block = self._by_hash.get(h)
            if block is None:
                break
            found.append(block)
        return found

    # -- internals ----------------------------------------------------------------------------

    def _ref(self, block: int) -> None:
        if self._seq_refs[block] == 0:
            self._num_seq_used += 1
        self._seq_refs[block] += 1

    def _unref(self, block: int) -> None:
        self._seq_refs[block] -= 1
        if self._seq_refs[block] == 0:
            self._num_seq_used -= 1
            self._maybe_release(block)

    def _take(self) -> int:
        if self._free:
            return self._free.popleft()
        block, _ = self._evictable.popitem(last=False)  # least recently released
        del self._by_hash[self._hash_of.pop(block)]
        return block

    def _maybe_release(self, block: int) -> None:
        if self.ref_count(block):
            return
        if block in self._hash_of:
            self._evictable[block] = None
        else:
            self._free.append(block)
