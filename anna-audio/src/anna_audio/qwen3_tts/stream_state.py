"""What a streamed codec decode carries from one chunk to the next."""

from __future__ import annotations

import torch
from torch import nn


class StreamState:
    """The left context of every causal layer of one streamed decode (a batch of rows advancing together).

    Each layer keeps what its next chunk needs from the past under its own key: a convolution the last
    ``(kernel - 1) * dilation`` input samples, a transposed convolution its last input frames, an attention layer
    the keys and values of the window behind the chunk. ``frames`` counts the code frames decoded so far (the
    position of the next chunk's first frame). A fresh state is all zeros / empty: decoding a whole sequence
    is one chunk on a fresh state, so chunked and whole decodes run the same arithmetic.
    """

    def __init__(self) -> None:
        self.frames = 0
        self._tails: dict[int, torch.Tensor] = {}

    def get(self, layer: nn.Module) -> torch.Tensor | None:
        """The tensor ``layer`` stored after the previous chunk, or None on the first chunk."""
        return self._tails.get(id(layer))

    def put(self, layer: nn.Module, value: torch.Tensor) -> None:
        self._tails[id(layer)] = value
