"""Dequantization of GGML tensor types to a torch floating-point dtype, vectorised over blocks.

GGML quantizes a row of ``n`` values (``n`` a multiple of the block size) as consecutive blocks.
Block layouts (little-endian, after llama.cpp's ``ggml-common.h``; each is checked against
``gguf.quants.dequantize`` in ``tests/core/test_gguf_dequant.py``):

* ``Q4_0``  (32 values, 18 bytes): ``d: f16, qs[16]``; value ``j`` is ``d * (q_j - 8)`` with
  ``q_j`` the low nibble of ``qs[j]`` for ``j < 16`` and the high nibble of ``qs[j-16]`` after.
* ``Q4_1``  (32, 20): ``d, m: f16, qs[16]``; ``d * q_j + m``.
* ``Q5_0``  (32, 22): ``d: f16, qh: u32, qs[16]``; bit ``j`` of ``qh`` is bit 4 of ``q_j``;
  ``d * (q_j - 16)``.
* ``Q5_1``  (32, 24): ``d, m: f16, qh: u32, qs[16]``; ``d * q_j + m``.
* ``Q8_0``  (32, 34): ``d: f16, qs: i8[32]``; ``d * q_j``.
* ``Q4_K``  (256, 144): ``d, dmin: f16, scales[12], qs[128]``; 8 sub-blocks of 32 with 6-bit
  scale ``sc`` and min ``m`` packed in ``scales``; ``d * sc * q - dmin * m``. Byte group ``g``
  (32 bytes of ``qs``) holds sub-block ``2g`` in its low nibbles and ``2g+1`` in its high nibbles.
* ``Q5_K``  (256, 176): ``d, dmin, scales[12], qh[32], qs[128]``; as ``Q4_K`` with bit ``s`` of
  ``qh[l]`` the fifth bit of value ``l`` of sub-block ``s``.
* ``Q6_K``  (256, 210): ``ql[128], qh[64], scales: i8[16], d: f16``; 6-bit values minus 32, one
  scale per 16 values; ``d * scale * q``.
* ``F32``, ``F16``, ``BF16``: plain.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from anna_core.errors import ModelLoadError


def _f16(b: torch.Tensor) -> torch.Tensor:
    """``[N, 2k]`` uint8 -> ``[N, k]`` float32 (little-endian float16 fields)."""
    return b.contiguous().view(torch.float16).float()


def _low_high(qs: torch.Tensor) -> torch.Tensor:
    """``[N, 16]`` packed nibbles -> ``[N, 32]``: all low nibbles, then all high nibbles."""
    out = torch.empty((qs.shape[0], 2, 16), dtype=torch.uint8, device=qs.device)
    torch.bitwise_and(qs, 0x0F, out=out[:, 0])
    torch.bitwise_right_shift(qs, 4, out=out[:, 1])
    return out.view(-1, 32)


def _bits(b: torch.Tensor) -> torch.Tensor:
    """``[N, k]`` uint8 -> ``[N, 8k]`` bits, little-endian (bit ``i`` of byte ``j`` at ``8j + i``)."""
    shifts = torch.arange(8, device=b.device, dtype=torch.uint8)
    return ((b[..., None] >> shifts) & 1).flatten(-2)


def _k_scales(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The 8 six-bit (scale, min) pairs packed in 12 bytes ``[N, 12]`` -> two ``[N, 8]`` float32."""
    s0, s1, s2 = s[:, 0:4], s[:, 4:8], s[:, 8:12]
    sc = torch.cat((s0 & 63, (s2 & 0x0F) | ((s0 >> 6) << 4)), dim=-1)
    mn = torch.cat((s1 & 63, (s2 >> 4) | ((s1 >> 6) << 4)), dim=-1)
    return sc.float(), mn.float()


def _k_nibbles(qs: torch.Tensor) -> torch.Tensor:
    """``[N, 128]`` -> ``[N, 8, 32]``: sub-block ``2g`` / ``2g+1`` from low / high nibbles of group ``g``."""
    g = qs.reshape(-1, 4, 1, 32)
    return torch.cat((g & 0x0F, g >> 4), dim=2).reshape(-1, 8, 32)


def _q4_0(b: torch.Tensor):
    d = _f16(b[:, :2])
    return _low_high(b[:, 2:18]), d, -8 * d, 32, 4


def _q4_1(b: torch.Tensor):
    return _low_high(b[:, 4:20]), _f16(b[:, :2]), _f16(b[:, 2:4]), 32, 4


def _q5_0(b: torch.Tensor):
    d = _f16(b[:, :2])
    return _low_high(b[:, 6:22]) | (_bits(b[:, 2:6]) << 4), d, -16 * d, 32, 5


def _q5_1(b: torch.Tensor):
    return _low_high(b[:, 8:24]) | (_bits(b[:, 4:8]) << 4), _f16(b[:, :2]), _f16(b[:, 2:4]), 32, 5


def _q8_0(b: torch.Tensor):
    d = _f16(b[:, :2])
    q = (b[:, 2:34].contiguous().view(torch.int8).to(torch.int16) + 128).to(torch.uint8)
    return q, d, -128 * d, 32, 8


def _q4_k(b: torch.Tensor):
    d, dmin = _f16(b[:, 0:2]), _f16(b[:, 2:4])
    sc, mn = _k_scales(b[:, 4:16])
    return _k_nibbles(b[:, 16:144]).flatten(1), d * sc, -(dmin * mn), 32, 4


def _q5_k(b: torch.Tensor):
    d, dmin = _f16(b[:, 0:2]), _f16(b[:, 2:4])
    sc, mn = _k_scales(b[:, 4:16])
    shifts = torch.arange(8, device=b.device, dtype=torch.uint8)
    high = (b[:, 16:48][:, None, :] >> shifts[None, :, None]) & 1  # [N, 8 sub-blocks, 32]
    q = _k_nibbles(b[:, 48:176]) | (high << 4)
    return q.flatten(1), d * sc, -(dmin * mn), 32, 5


def _q6_k(b: torch.Tensor):
    n = b.shape[0]
    ql = b[:, 0:128].reshape(n, 2, 1, 2, 32)
    qh = b[:, 128:192].reshape(n, 2, 1, 1, 32)
    scales = b[:, 192:208].contiguous().view(torch.int8).float()  # [N, 16]
    d = _f16(b[:, 208:210])
    low = torch.cat((ql & 0x0F, ql >> 4), dim=2)
    shifts = torch.tensor([[0, 2], [4, 6]], device=b.device, dtype=torch.uint8).reshape(1, 1, 2, 2, 1)
    q = (low | (((qh >> shifts) & 3) << 4)).reshape(n, 256)
    a = d * scales
    return q, a, -32 * a, 16, 6


AFFINE_DECODERS: dict[str, tuple[int, int, Any]] = {
    "Q4_0": (32, 18, _q4_0),
    "Q4_1": (32, 20, _q4_1),
    "Q5_0": (32, 22, _q5_0),
    "Q5_1": (32, 24, _q5_1),
    "Q8_0": (32, 34, _q8_0),
    "Q4_K": (256, 144, _q4_k),
    "Q5_K": (256, 176, _q5_k),
    "Q6_K": (256, 210, _q6_k),
}
"""GGML type name -> ``(values per block, bytes per block, decoder)``; a decoder maps ``[nb, bytes]`` uint8 blocks to
``(q [nb, block] uint8 codes, a, b [nb, block / g] float32, g, bits)`` with value ``a * q + b`` per group of ``g``
(exact in float32: each product and sum fits its mantissa). :func:`dequantize` and
:mod:`anna_core.weights.gguf_blocks` (weights kept quantized) both decode through it."""


def _values(q: torch.Tensor, a: torch.Tensor, b: torch.Tensor, g: int, bits: int) -> torch.Tensor:
    nb, block = q.shape
    return (a[..., None] * q.float().view(nb, block // g, g) + b[..., None]).flatten(1)  # [nb, block] float32

_PLAIN_TYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}

SUPPORTED_TYPES: tuple[str, ...] = tuple(AFFINE_DECODERS) + tuple(_PLAIN_TYPES)
"""GGML type names :func:`dequantize` handles."""


def _to_uint8(raw: np.ndarray | torch.Tensor, device: torch.device | str) -> torch.Tensor:
    if isinstance(raw, torch.Tensor):
        return raw.reshape(-1).view(torch.uint8).to(device)
    # One copy out of the (read-only) memory map, then to the device.
    return torch.from_numpy(np.ascontiguousarray(raw).reshape(-1).view(np.uint8).copy()).to(device)


def dequantize(
    raw: np.ndarray | torch.Tensor,
    ggml_type: Any,
    shape: tuple[int, ...],
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """Decode a stored GGML tensor.

    Args:
        raw: the stored data (any dtype/shape; its bytes are what counts), e.g. a ``GGUFTensor.raw``.
        ggml_type: a ``gguf.GGMLQuantizationType`` or its name (``"Q4_1"``).
        shape: logical shape in torch order; the last dimension is the one split into blocks.
        dtype: output dtype (math runs in float32, then one cast).
        device: where decoding runs and the result lives (decoding on an accelerator is faster).

    Returns:
        ``shape`` tensor of ``dtype`` on ``device``.

    Raises:
        ModelLoadError: unsupported type, a row length that is not a multiple of the block
            size, or a byte count that does not match ``shape``.
    """
    name = getattr(ggml_type, "name", str(ggml_type))
    numel = int(np.prod(shape)) if shape else 1
    data = _to_uint8(raw, device)
    if name in _PLAIN_TYPES:
        src = _PLAIN_TYPES[name]
        if data.numel() != numel * src.itemsize:
            raise ModelLoadError(f"{name} tensor of shape {list(shape)} needs {numel * src.itemsize} bytes, "
                                 f"got {data.numel()}")
        return data.view(src).reshape(shape).to(dtype)
    if name not in AFFINE_DECODERS:
        raise ModelLoadError(f"GGML type {name} is not supported; supported: {list(SUPPORTED_TYPES)}")
    block, nbytes, decode = AFFINE_DECODERS[name]
    if not shape or shape[-1] % block:
        raise ModelLoadError(f"{name} tensor of shape {list(shape)}: rows must be a multiple of {block} values")
    nblocks = numel // block
    if data.numel() != nblocks * nbytes:
        raise ModelLoadError(f"{name} tensor of shape {list(shape)} needs {nblocks * nbytes} bytes, "
                             f"got {data.numel()}")
    values = _values(*decode(data.reshape(nblocks, nbytes)))  # [nblocks, block] float32
    return values.reshape(shape).to(dtype)
