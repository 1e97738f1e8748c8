"""Recurrent-state slot bookkeeping: which sequence owns which slot of the state pools.

Pure Python (no torch). The model runner zeroes a slot's tensors before a sequence's first
chunk (the kernels expect a fresh sequence's state to be zero).
"""

from __future__ import annotations

from collections import deque

from anna_core.errors import AnnaError


class StatePool:
    """Hands out slot indices ``0 .. num_slots-1``, one per running sequence.

    Args:
        num_slots: slots in the pool (the engine uses ``max_num_seqs``).
    """

    def __init__(self, num_slots: int):
        if num_slots < 1:
            raise AnnaError(f"need at least one state slot, got {num_slots}")
        self.num_slots = num_slots
        self._free: deque[int] = deque(range(num_slots))
        self._owner: dict[str, int] = {}
        self._assigned: list[int] = []  # slots handed out since take_assigned last ran

    @property
    def num_free_slots(self) -> int:
        return len(self._free)

    @property
    def num_used_slots(self) -> int:
        return self.num_slots - len(self._free)

    def slot(self, seq_id: str) -> int | None:
        return self._owner.get(seq_id)

    def allocate(self, seq_id: str) -> int:
        """The slot of ``seq_id``, taking a free one if it has none.

        Raises:
            AnnaError: no free slot.
        """
        if seq_id in self._owner:
            return self._owner[seq_id]
        if not self._free:
            raise AnnaError(f"out of state slots ({self.num_slots} in use)")
        slot = self._free.popleft()
        self._owner[seq_id] = slot
        self._assigned.append(slot)
        return slot

    def take_assigned(self) -> list[int]:
        """The slots handed out since the last call (their per-slot device state may hold an earlier owner's)."""
        taken, self._assigned = self._assigned, []
        return taken

    def free(self, seq_id: str) -> None:
        """Return ``seq_id``'s slot to the pool (a no-op if it has none)."""
        slot = self._owner.pop(seq_id, None)
        if slot is not None:
            self._free.append(slot)
