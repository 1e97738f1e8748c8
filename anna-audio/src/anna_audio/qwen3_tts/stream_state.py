"""What a streamed codec decode carries from one chunk to the next: per stream, one flat vector holding the left
context of every causal layer; per decoded chunk, the rows' contexts in and out as fixed-shape device tensors.

The layout is fixed by the decoder (:class:`StateLayout`), so a chunk's decode has the same shapes whatever its
streams' positions are and reads nothing on the host: it can be captured in a device graph
(:class:`~anna_audio.speech.vocoder_graphs.VocoderGraphs`). A fresh stream's context is zeros, which is what a whole
decode sees before the first sample (attention masks the keys before a stream's first frame by its position).
"""

from __future__ import annotations

import torch
from torch import nn


class ContextLayer(nn.Module):
    """A causal layer of the codec decoder that continues a stream from the context the previous chunk left:
    :attr:`context_shape` is the per-stream shape of that context (None: the layer keeps none)."""

    @property
    def context_shape(self) -> tuple[int, ...] | None:
        raise NotImplementedError


class StateLayout:
    """Where each :class:`ContextLayer` of a decoder keeps its context inside a stream's flat context vector.

    Args:
        layers: the decoder's modules (every :class:`ContextLayer` among them with a context gets a span).
        dtype, device: of the context (the decoder's parameters').
    """

    def __init__(self, layers: list[nn.Module], dtype: torch.dtype, device: torch.device) -> None:
        self.spans: dict[int, tuple[int, tuple[int, ...]]] = {}
        size = 0
        for layer in layers:
            if isinstance(layer, ContextLayer) and layer.context_shape is not None:
                shape = layer.context_shape
                self.spans[id(layer)] = (size, shape)
                size += int(torch.Size(shape).numel())
        self.size = size
        self.dtype = dtype
        self.device = device
        self.zeros = torch.zeros(size, dtype=dtype, device=device)  # a fresh stream's context


class StreamState:
    """One stream (one request's waveform): ``frames`` code frames decoded so far (the position of the next chunk's
    first frame) and ``tail``, its context ``[StateLayout.size]`` on the decoder's device (None: fresh)."""

    def __init__(self) -> None:
        self.frames = 0
        self.tail: torch.Tensor | None = None


class ChunkContext:
    """The device side of one chunk's decode over ``B`` streams: their positions and their contexts in and out.

    Args:
        layout: the decoder's :class:`StateLayout`.
        starts: ``[B]`` int64, each stream's next frame position.
        past: ``[B, layout.size]``, each stream's context before the chunk (read).
        new: ``[B, layout.size]``, filled with each stream's context after the chunk (written).
    """

    def __init__(self, layout: StateLayout, starts: torch.Tensor, past: torch.Tensor, new: torch.Tensor) -> None:
        self.layout = layout
        self.starts = starts
        self.past = past
        self.new = new

    def _span(self, buffer: torch.Tensor, layer: nn.Module) -> torch.Tensor:
        offset, shape = self.layout.spans[id(layer)]
        return buffer[:, offset:offset + int(torch.Size(shape).numel())].view(buffer.shape[0], *shape)

    def get(self, layer: nn.Module) -> torch.Tensor:
        """``[B, *layer.context_shape]``: the rows' context of ``layer`` before the chunk."""
        return self._span(self.past, layer)

    def put(self, layer: nn.Module, value: torch.Tensor) -> None:
        """Store ``value`` ``[B, *layer.context_shape]`` as the rows' context of ``layer`` after the chunk."""
        self._span(self.new, layer).copy_(value)


class StreamBatch:
    """Streams decoded together in one eager call, each advancing by the same number of frames from its own
    position: :attr:`context` stacks their contexts (zeros for fresh ones); :meth:`advance` hands each stream its
    new context and position.

    Raises:
        ValueError: no streams.
    """

    def __init__(self, streams: list[StreamState], layout: StateLayout) -> None:
        if not streams:
            raise ValueError("a stream batch needs at least one stream")
        self.streams = streams
        rows = [s.tail if s.tail is not None else layout.zeros for s in streams]
        past = torch.stack(rows)
        starts = torch.tensor([s.frames for s in streams], dtype=torch.int64, device=layout.device)
        self.context = ChunkContext(layout, starts, past, torch.empty_like(past))

    def advance(self, frames: int) -> None:
        advance(self.streams, self.context.new, frames)


def advance(streams: list[StreamState], new: torch.Tensor, frames: int) -> None:
    """Move each stream ``frames`` frames on, its context now row ``i`` of ``new`` ``[len(streams), size]`` (kept
    by reference: ``new`` must not be overwritten afterwards)."""
    for row, state in enumerate(streams):
        state.tail = new[row]
        state.frames += frames
