"""Which slice of each checkpoint tensor a rank holds, and reading only that slice.

A family declares its sharding as ``(regex, Shard)`` rules over its *parameter* names (the first match wins;
a parameter no rule matches is replicated). :class:`ShardReader` reads a rank's slice of a tensor through
``safetensors``' lazy ``get_slice``, so no rank reads a whole sharded tensor.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import attrs
import torch

from anna_core.distributed.state import ParallelState
from anna_core.errors import ModelLoadError


@attrs.frozen
class Shard:
    """How one parameter splits across the ranks.

    Attributes:
        dim: the split dimension: 0 for the output rows of a column-parallel projection (its heads or
            intermediate units), a vocabulary's rows, or a per-head vector; 1 for the input columns of a
            row-parallel projection.
        segments: the sizes, along ``dim``, of the parts concatenated in the tensor (e.g. a fused q | k | v
            projection), each split evenly so every rank keeps its heads of each part; ``()``: one part.
        pad: split ``ceil(n / world_size)`` rows per rank, the last rank's missing rows zeros (a vocabulary
            the size does not divide); otherwise every part must divide evenly.
    """

    dim: int = 0
    segments: tuple[int, ...] = ()
    pad: bool = False

    def ranges(self, full: int, parallel: ParallelState) -> list[tuple[int, int]]:
        """The ``[start, end)`` ranges along :attr:`dim` rank ``parallel.rank`` holds, in order.

        Raises:
            ModelLoadError: the segments do not add up to ``full``, or a part the size does not divide.
        """
        n, r = parallel.world_size, parallel.rank
        if self.pad:
            rows = math.ceil(full / n)
            return [(min(full, r * rows), min(full, (r + 1) * rows))]
        segments = self.segments or (full,)
        if sum(segments) != full:
            raise ModelLoadError(f"shard segments {list(segments)} do not add up to the tensor's {full} rows")
        out, offset = [], 0
        for size in segments:
            if size % n:
                raise ModelLoadError(f"tensor parallel size {n} does not divide a part of {size} rows")
            part = size // n
            out.append((offset + r * part, offset + (r + 1) * part))
            offset += size
        return out

    def local_size(self, full: int, world_size: int) -> int:
        """Rows along :attr:`dim` a rank holds (padded ones included)."""
        return math.ceil(full / world_size) if self.pad else full // world_size


class ShardReader:
    """Reads a rank's slices of the checkpoint tensors for :func:`anna_core.weights.safetensors_loader.load_safetensors`.

    Args:
        rules: ``(regex, Shard)`` pairs matched (``re.search``) against parameter names, first match wins.
        parallel: the rank's state.
    """

    def __init__(self, rules: Sequence[tuple[str, Shard]], parallel: ParallelState):
        self.rules = [(re.compile(p), s) for p, s in rules]
        self.parallel = parallel

    def shard_of(self, param: str) -> Shard | None:
        """The rule's shard for parameter ``param``, or None (replicated)."""
        for pattern, shard in self.rules:
            if pattern.search(param):
                return shard
        return None

    def local_shape(self, param: str, full: Sequence[int]) -> tuple[int, ...]:
        """The shape rank ``parallel.rank`` holds of a tensor of shape ``full`` loaded into ``param``."""
        shape = list(full)
        shard = self.shard_of(param)
        if shard is not None and shard.dim < len(shape):
            shape[shard.dim] = shard.local_size(shape[shard.dim], self.parallel.world_size)
        return tuple(shape)

    def read(self, param: str, tensor: Any) -> torch.Tensor:
        """This rank's slice of the checkpoint tensor behind ``tensor`` (a safetensors ``get_slice`` handle, or a
        whole tensor: random weights drawn at the full model's shape).

        Raises:
            ModelLoadError: the tensor's shape does not split as the rule says.
        """
        shape = list(tensor.shape) if isinstance(tensor, torch.Tensor) else list(tensor.get_shape())
        shard = self.shard_of(param)
        if shard is None:
            return tensor[:]
        if shard.dim >= len(shape):
            raise ModelLoadError(f"{param}: a shard along dim {shard.dim} of a {len(shape)}-d tensor")
        lead = (slice(None),) * shard.dim
        parts = [tensor[(*lead, slice(a, b))] for a, b in shard.ranges(shape[shard.dim], self.parallel)]
        out = parts[0] if len(parts) == 1 else torch.cat(parts, dim=shard.dim)
        want = shard.local_size(shape[shard.dim], self.parallel.world_size)
        if out.shape[shard.dim] < want:  # a padded vocabulary's last rank: zero rows
            pad = list(out.shape)
            pad[shard.dim] = want - out.shape[shard.dim]
            out = torch.cat([out, out.new_zeros(pad)], dim=shard.dim)
        return out
