"""Which media's encoder outputs the model runner holds (the scheduler's bookkeeping; pure Python).

The runner keeps the encoder output of a medium (``[length, hidden]``, :mod:`anna_core.multimodal`)
from the step that encodes it until no request still has placeholders of it left to compute, so a
prefill cut into chunks encodes each medium once. Entries are keyed by the medium's key (content hash
and length, :attr:`~anna_core.multimodal.MediaItem.key`): requests carrying the same image share one output. Capacity is counted in encoder-output rows
(placeholder tokens).

The scheduler :meth:`acquire`\\ s an entry when it schedules a chunk that covers placeholders of a
medium, :meth:`release`\\ s it when the request is no longer inside it (or finishes, or is
preempted); an entry nobody holds is dropped at once, and the runner is told to drop its tensor through
``SchedulerOutput.free_encoder_hashes`` of the next step (:meth:`take_freed`).
"""

from __future__ import annotations

from anna_core.errors import AnnaError


class EncoderCacheManager:
    """Encoder-output entries held for requests.

    Args:
        capacity: encoder-output rows the runner may hold at once (at least the largest medium).

    Raises:
        AnnaError: a non-positive capacity.
    """

    def __init__(self, capacity: int):
        if capacity < 1:
            raise AnnaError(f"the encoder cache needs a positive capacity, got {capacity}")
        self.capacity = capacity
        self._rows: dict[bytes, int] = {}  # hash -> rows
        self._holders: dict[bytes, set[str]] = {}  # hash -> request ids holding it
        self._held: dict[str, set[bytes]] = {}  # request id -> hashes it holds
        self._freed: list[bytes] = []
        self.num_used = 0

    @property
    def num_free(self) -> int:
        """Rows a new entry may still take."""
        return self.capacity - self.num_used

    def __contains__(self, content_hash: bytes) -> bool:
        """Whether an entry of that key exists (held by some request)."""
        return content_hash in self._rows

    def holds(self, request_id: str, content_hash: bytes) -> bool:
        """Whether ``request_id`` holds the entry of that key."""
        return content_hash in self._held.get(request_id, ())

    def held_by(self, request_id: str) -> set[bytes]:
        """The hashes ``request_id`` holds (a copy)."""
        return set(self._held.get(request_id, ()))

    def acquire(self, request_id: str, content_hash: bytes, rows: int) -> bool:
        """Hold the entry of ``content_hash`` for ``request_id``, adding it when absent.

        Returns:
            True when the entry is new (its medium must be encoded in this step).

        Raises:
            AnnaError: a new entry does not fit (check :attr:`num_free` first).
        """
        new = content_hash not in self._rows
        if new:
            if rows > self.num_free:
                raise AnnaError(f"the encoder cache has {self.num_free} free rows, a medium needs {rows}")
            self._rows[content_hash] = rows
            self._holders[content_hash] = set()
            self.num_used += rows
        self._holders[content_hash].add(request_id)
        self._held.setdefault(request_id, set()).add(content_hash)
        return new

    def release(self, request_id: str, content_hash: bytes) -> None:
        """``request_id`` no longer needs the entry; dropped when nobody holds it (no-op if not held)."""
        held = self._held.get(request_id)
        if held is None or content_hash not in held:
            return
        held.discard(content_hash)
        if not held:
            del self._held[request_id]
        holders = self._holders[content_hash]
        holders.discard(request_id)
        if not holders:
            del self._holders[content_hash]
            self.num_used -= self._rows.pop(content_hash)
            self._freed.append(content_hash)

    def release_all(self, request_id: str) -> None:
        """Release every entry ``request_id`` holds (it finished or was preempted)."""
        for content_hash in list(self._held.get(request_id, ())):
            self.release(request_id, content_hash)

    def take_freed(self) -> list[bytes]:
        """The hashes dropped since the last call (the runner drops their tensors)."""
        freed, self._freed = self._freed, []
        return freed
