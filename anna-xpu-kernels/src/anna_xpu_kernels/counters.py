"""Arrival counters of the last-arriver handshakes (the fused GDN decode step, split-K GEMV).

Several programs of one launch each write a partial result, then increment a counter with an
acquire-release atomic; the program that sees the count reach the group size knows every other
partial is visible and finishes the work (and resets the counter to zero for the next launch).
"""

from __future__ import annotations

import torch


class CounterPool:
    """Per-device ``int32`` arrival counters of the last-arriver handshake, zero between launches.

    One buffer per device, grown (never shrunk) when a launch needs more words; a new buffer is
    zero-filled when allocated, and every launch leaves the words it used at zero. A replaced buffer
    is kept alive: a CUDA graph captured with it still points at its memory.
    """

    def __init__(self, min_words: int = 4096):
        self.min_words = min_words
        self._buffers: dict[torch.device, torch.Tensor] = {}
        self._retired: list[torch.Tensor] = []

    def get(self, device: torch.device, words: int) -> torch.Tensor:
        """At least ``words`` zeroed int32 counters on ``device``."""
        buf = self._buffers.get(device)
        if buf is None or buf.numel() < words:
            if buf is not None:
                self._retired.append(buf)
            buf = torch.zeros(max(words, self.min_words, 2 * (0 if buf is None else buf.numel())),
                              dtype=torch.int32, device=device)
            self._buffers[device] = buf
        return buf
