"""GGML block types as *affine blocks*: integer codes plus one (scale, offset) pair per group.

Every GGML type that :mod:`anna_core.kernels.reference.int4_linear` packs stores, for a row of a
matrix, groups of ``g`` values, each group ``w = a * q + b`` with small unsigned integer codes ``q``
and float32 ``a``, ``b`` per (row, group). :func:`affine_blocks` decodes a stored tensor into that
form (the block layouts are :mod:`anna_core.weights.dequant`'s):

=========  =====  ==========  =====================  =======================
type       ``g``  ``q``       ``a``                  ``b``
=========  =====  ==========  =====================  =======================
``Q4_0``   32     0..15       ``d``                  ``-8 d``
``Q4_1``   32     0..15       ``d``                  ``m``
``Q5_0``   32     0..31       ``d``                  ``-16 d``
``Q5_1``   32     0..31       ``d``                  ``m``
``Q8_0``   32     0..255      ``d``                  ``-128 d`` (``q = int8 + 128``)
``Q4_K``   32     0..15       ``d * sc``             ``-dmin * m``
``Q5_K``   32     0..31       ``d * sc``             ``-dmin * m``
``Q6_K``   16     0..63       ``d * sc`` (int8 sc)   ``-32 d * sc``
=========  =====  ==========  =====================  =======================

``a`` and ``b`` are exact in float32 (an fp16 times an integer of at most 8 bits), so ``a * q + b``
equals llama.cpp's dequantized value up to one float32 rounding. The codes stay one byte each here;
the packer turns them into the kernel's layout and this form is dropped.
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np
import torch

from anna_core.errors import ModelLoadError
from anna_core.weights.dequant import AFFINE_DECODERS, _to_uint8


@attrs.frozen
class AffineBlocks:
    """A ``[N, K]`` matrix as ``w[n, k] = a[n, k // g] * q[n, k] + b[n, k // g]``.

    Attributes:
        q: ``[N, K]`` uint8 codes in ``[0, 2**bits)``.
        a, b: ``[N, K // g]`` float32 scale and offset per (row, group).
        group: ``g`` (16 or 32 for GGML types, 128 for Anna's own int4).
        bits: the codes' width (4, 5, 6 or 8).
        source: the GGML type name it came from (``"Q4_1"``), for logs and ``repr``.
    """

    q: torch.Tensor
    a: torch.Tensor
    b: torch.Tensor
    group: int
    bits: int
    source: str = ""

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.q.shape[0]), int(self.q.shape[1]))

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The ``[N, K]`` matrix (float32 math, one cast)."""
        n, k = self.shape
        q = self.q.float().view(n, k // self.group, self.group)
        return (self.a[..., None] * q + self.b[..., None]).reshape(n, k).to(dtype)

    def rows(self, fn: Any) -> AffineBlocks:
        """The same blocks with ``fn`` (a function permuting or selecting dim 0) applied to q, a and b."""
        return attrs.evolve(self, q=fn(self.q), a=fn(self.a), b=fn(self.b))

    @staticmethod
    def cat(parts: list[AffineBlocks]) -> AffineBlocks:
        """Rows of ``parts`` stacked (projections merged into one matrix). Parts of different types merge
        exactly: the result has the smallest group (a larger group's scales repeat) and the widest codes."""
        group = min(p.group for p in parts)
        if any(p.group % group or p.shape[1] != parts[0].shape[1] for p in parts):
            raise ValueError(f"cannot merge blocks of {[(p.source, p.shape, p.group) for p in parts]}")

        def scales(t: torch.Tensor, g: int) -> torch.Tensor:
            return t if g == group else t.repeat_interleave(g // group, dim=1)

        sources = sorted({p.source for p in parts})
        return AffineBlocks(torch.cat([p.q for p in parts]), torch.cat([scales(p.a, p.group) for p in parts]),
                            torch.cat([scales(p.b, p.group) for p in parts]), group, max(p.bits for p in parts),
                            "+".join(sources))



AFFINE_TYPES: tuple[str, ...] = tuple(AFFINE_DECODERS)
"""GGML type names :func:`affine_blocks` decodes (the quantized types a kernel can keep packed)."""


def affine_blocks(raw: np.ndarray | torch.Tensor, ggml_type: Any, shape: tuple[int, ...]) -> AffineBlocks:
    """Decode a stored 2-D GGML tensor ``shape = (N, K)`` (torch order) into :class:`AffineBlocks` on the CPU.

    Raises:
        ModelLoadError: a type not in :data:`AFFINE_TYPES`, a tensor that is not 2-D, rows that are not a
            multiple of the block, or a byte count that does not match ``shape``.
    """
    name = getattr(ggml_type, "name", str(ggml_type))
    if name not in AFFINE_DECODERS:
        raise ModelLoadError(f"GGML type {name} has no packed form; packed: {list(AFFINE_TYPES)}")
    if len(shape) != 2:
        raise ModelLoadError(f"{name} tensor of shape {list(shape)}: only matrices are kept packed")
    block, nbytes, decode = AFFINE_DECODERS[name]
    n, k = shape
    if k % block:
        raise ModelLoadError(f"{name} tensor of shape {list(shape)}: rows must be a multiple of {block} values")
    data = _to_uint8(raw, "cpu")
    nblocks = n * k // block
    if data.numel() != nblocks * nbytes:
        raise ModelLoadError(f"{name} tensor of shape {list(shape)} needs {nblocks * nbytes} bytes, got {data.numel()}")
    q, a, b, group, bits = decode(data.reshape(nblocks, nbytes))
    return AffineBlocks(q.reshape(n, k).contiguous(), a.reshape(n, k // group).contiguous(),
                        b.reshape(n, k // group).contiguous(), group, bits, name)
