"""What a streamed codec decode carries from one chunk to the next, per stream and for a batch of streams."""

from __future__ import annotations

import torch
from torch import nn


class StreamState:
    """The left context of every causal layer of one stream (one request's waveform).

    Each layer keeps what its next chunk needs from the past under its own key, as a one-row tensor: a
    convolution its last ``(kernel - 1) * dilation`` input samples (``[1, C, context]``), a transposed convolution
    its last input frames, an attention layer the rotated keys and values of the window behind the chunk
    (``[2, 1, H_kv, L, Dh]``, ``L < window``). ``frames`` counts the code frames decoded so far (the position of
    the next chunk's first frame). A fresh state is empty: zeros before the first sample, no keys before the first
    frame, as a whole decode sees them.
    """

    def __init__(self) -> None:
        self.frames = 0
        self.tails: dict[int, torch.Tensor] = {}


class StreamBatch:
    """Streams decoded together in one call, each advancing by the same number of frames from its own position.

    Layers read and write their context through it: :meth:`get` / :meth:`put` stack and split the rows' tails
    (a fresh row reads zeros), :meth:`get_window` / :meth:`put_window` do the same for attention keys and values,
    whose lengths differ per row (left-padded with zeros, with each row's length to mask the padding).
    """

    def __init__(self, states: list[StreamState]) -> None:
        if not states:
            raise ValueError("a stream batch needs at least one stream")
        self.states = states

    def starts(self, device: torch.device) -> torch.Tensor:
        """``[B]`` int64: each stream's next frame position."""
        return torch.tensor([s.frames for s in self.states], dtype=torch.int64, device=device)

    def get(self, layer: nn.Module) -> torch.Tensor | None:
        """The rows' stored tails of ``layer`` stacked (``[B, ...]``; zeros for fresh rows), or None when every row
        is fresh."""
        rows = [s.tails.get(id(layer)) for s in self.states]
        present = next((r for r in rows if r is not None), None)
        if present is None:
            return None
        return torch.cat([r if r is not None else torch.zeros_like(present) for r in rows])

    def put(self, layer: nn.Module, value: torch.Tensor) -> None:
        """Store ``value`` ``[B, ...]`` row by row as each stream's tail of ``layer``."""
        for row, state in enumerate(self.states):
            state.tails[id(layer)] = value[row:row + 1]

    def get_window(self, layer: nn.Module) -> tuple[torch.Tensor | None, torch.Tensor]:
        """``(kv, lengths)``: the rows' stored keys and values ``[2, B, H_kv, L_max, Dh]`` left-padded with zeros
        (None when no row holds any) and each row's count ``[B]`` int64 (on the CPU)."""
        rows = [s.tails.get(id(layer)) for s in self.states]
        lengths = torch.tensor([0 if r is None else r.shape[3] for r in rows], dtype=torch.int64)
        longest = int(lengths.max())
        if longest == 0:
            return None, lengths
        like = next(r for r in rows if r is not None)
        padded = []
        for r in rows:
            held = 0 if r is None else r.shape[3]
            pad = like.new_zeros(2, 1, like.shape[2], longest - held, like.shape[4])
            padded.append(pad if r is None else torch.cat((pad, r), dim=3))
        return torch.cat(padded, dim=1), lengths

    def put_window(self, layer: nn.Module, kv: torch.Tensor, lengths: torch.Tensor, keep: int) -> None:
        """Store each row's last ``min(length, keep)`` valid entries of ``kv`` ``[2, B, H_kv, K, Dh]`` (row ``b``'s
        valid entries are its last ``lengths[b]``)."""
        for row, state in enumerate(self.states):
            count = min(int(lengths[row]), keep)
            if count > 0:
                state.tails[id(layer)] = kv[:, row:row + 1, :, kv.shape[3] - count:]

    def advance(self, frames: int) -> None:
        for state in self.states:
            state.frames += frames
