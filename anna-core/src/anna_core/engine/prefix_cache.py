"""Prefix-cache keys: a hash chain over full KV blocks (pure Python).

The key of block ``i`` of a sequence is ``H(key[i-1], tokens of block i, extra)`` with ``H`` the
16-byte BLAKE2b digest; ``key[-1]`` is empty. A key therefore names the block's tokens *and*
everything before them: equal blocks at different positions (or after different prefixes) get
different keys and never alias, and a block repeated inside one prompt is computed, not reused.
``extra`` names the media whose placeholder tokens fall in the block (their offsets and content hashes,
:meth:`anna_core.multimodal.MultiModalInputs.block_extra`), so equal placeholder tokens behind different
images get different keys; text-only blocks pass ``b""``.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Callable, Sequence


def hash_block(parent: bytes, tokens: Sequence[int], extra: bytes = b"") -> bytes:
    """The chain key of one block.

    Args:
        parent: the previous block's key (``b""`` for the first block).
        tokens: the block's token ids (non-negative, < 2**63).
        extra: bytes identifying non-token inputs of the block (multimodal hashes).
    """
    h = hashlib.blake2b(parent, digest_size=16)
    h.update(array("q", tokens).tobytes())
    if extra:
        h.update(b"\x00mm")
        h.update(extra)
    return h.digest()


def extend_hashes(hashes: list[bytes], token_slice: Callable[[int, int], Sequence[int]], num_blocks: int,
                  block_size: int, extra: Callable[[int, int], bytes] | None = None) -> list[bytes]:
    """Append chain keys to ``hashes`` until it covers ``num_blocks`` full blocks; returns ``hashes``.

    Args:
        hashes: keys of the sequence's first ``len(hashes)`` blocks (extended in place).
        token_slice: ``(start, end) -> token ids`` of the sequence (only full blocks are read).
        num_blocks: full blocks to cover.
        block_size: tokens per block.
        extra: ``(start, end) -> bytes`` the non-token inputs of tokens ``start .. end-1`` (media), or None.
    """
    for i in range(len(hashes), num_blocks):
        start, end = i * block_size, (i + 1) * block_size
        hashes.append(hash_block(hashes[i - 1] if i else b"", token_slice(start, end),
                                 extra(start, end) if extra is not None else b""))
    return hashes
