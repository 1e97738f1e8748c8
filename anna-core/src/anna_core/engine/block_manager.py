"""Paged KV-cache bookkeeping: a free list of block ids, ref counts and a block table per sequence.

Pure Python (no torch): the engine turns the block tables into index tensors. Ref counts exist
so that prefix caching can later share a block between sequences; today every block has one owner.
"""

from __future__ import annotations

from collections import deque

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
    """

    def __init__(self, num_blocks: int, block_size: int):
        if num_blocks < 1 or block_size < 1:
            raise AnnaError(f"need num_blocks >= 1 and block_size >= 1, got {num_blocks}, {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._free: deque[int] = deque(range(num_blocks))
        self._ref_counts = [0] * num_blocks
        self._tables: dict[str, list[int]] = {}

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self._free)

    def table(self, seq_id: str) -> list[int]:
        """The block table of ``seq_id`` (empty if it holds none). Do not mutate it."""
        return self._tables.get(seq_id, [])

    def blocks_needed(self, seq_id: str, num_tokens: int) -> int:
        """Extra blocks ``seq_id`` needs so that its table covers ``num_tokens`` tokens."""
        return max(0, blocks_for(num_tokens, self.block_size) - len(self.table(seq_id)))

    def can_allocate(self, seq_id: str, num_tokens: int) -> bool:
        return self.blocks_needed(seq_id, num_tokens) <= len(self._free)

    def allocate(self, seq_id: str, num_tokens: int) -> list[int]:
        """Grow ``seq_id``'s table to cover ``num_tokens`` tokens; returns the table.

        Raises:
            AnnaError: not enough free blocks (call :meth:`can_allocate` first).
        """
        need = self.blocks_needed(seq_id, num_tokens)
        if need > len(self._free):
            raise AnnaError(f"out of KV blocks: {seq_id!r} needs {need}, {len(self._free)} free")
        table = self._tables.setdefault(seq_id, [])
        for _ in range(need):
            block = self._free.popleft()
            self._ref_counts[block] = 1
            table.append(block)
        return table

    def free(self, seq_id: str) -> None:
        """Release every block of ``seq_id`` (a no-op if it holds none)."""
        for block in reversed(self._tables.pop(seq_id, [])):
            self._ref_counts[block] -= 1
            if self._ref_counts[block] == 0:
                self._free.append(block)

    def ref_count(self, block: int) -> int:
        return self._ref_counts[block]
