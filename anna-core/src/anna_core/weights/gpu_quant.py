"""Weight-only quantization for accelerators (``--weight-quant int4|int8|fp8`` on CUDA / XPU): the layouts
the ``wq_linear`` ops read, round-to-nearest quantization from the dense weight at load, and dequantization.

A quantized ``[N, K]`` weight is three tensors, ``(qweight, scale, zero)``, and a scheme name:

* ``"int4"``: groups of :data:`INT4_GROUP` = 128 columns, asymmetric. ``qweight`` ``[N, K/2]`` uint8, two
  codes ``q`` in ``[0, 15]`` per byte (column ``2j`` in the low nibble, ``2j + 1`` in the high one);
  ``scale``, ``zero`` ``[N, K/128]`` in the serving dtype (bfloat16 / float16; float32 for float32):
  ``w[n, k] = q[n, k] * scale[n, k // 128] + zero[n, k // 128]``. ``K`` must be a multiple of 128.
* ``"int8"``: one scale per output channel, symmetric. ``qweight`` ``[N, K]`` int8 in ``[-127, 127]``;
  ``scale`` ``[N]`` float32; ``zero`` None: ``w[n, k] = q[n, k] * scale[n]``.
* ``"fp8"``: FP8 e4m3 (``torch.float8_e4m3fn``) with one float32 scale per :data:`FP8_BLOCK` x
  :data:`FP8_BLOCK` block (the form of Qwen's FP8 releases). ``qweight`` ``[N, K]`` float8_e4m3fn;
  ``scale`` ``[ceil(N/128), ceil(K/128)]`` float32; ``zero`` None: ``w[n, k] = q[n, k] * scale[n // 128,
  k // 128]``.

Quantization is round-to-nearest from the weight in float32 (no calibration): int4 takes ``scale = (max -
min) / 15`` and ``zero = min`` per group, each rounded to the serving dtype *before* the codes are chosen (so
the codes fit the stored scale and zero: error at most ``scale / 2`` plus the zero's rounding); int8
``scale = max|w| / 127`` (error at most ``scale / 2``); fp8 ``scale = max|w| / 448`` per block and the
e4m3 rounding of ``w / scale`` (relative error at most ``2**-4``, subnormals below ``2**-6 * scale``).
"""

from __future__ import annotations

import math

import attrs
import torch

SCHEMES = ("int4", "int8", "fp8")
"""Weight quantization schemes of the ``wq_linear`` ops."""

INT4_GROUP = 128
"""Columns per int4 group (one scale and zero each)."""

FP8_BLOCK = 128
"""Rows and columns per FP8 scale block."""

FP8_MAX = 448.0
"""Largest finite float8_e4m3fn value."""


@attrs.frozen
class QuantizedWeight:
    """A ``[N, K]`` weight quantized for the ``wq_linear`` ops (layouts: module docstring).

    Attributes:
        qweight: the codes (int4: ``[N, K/2]`` uint8; int8: ``[N, K]`` int8; fp8: ``[N, K]`` float8_e4m3fn).
        scale: int4 ``[N, K/128]`` (serving dtype); int8 ``[N]`` float32; fp8 ``[ceil(N/128), ceil(K/128)]`` float32.
        zero: int4 ``[N, K/128]`` (scale's dtype); None otherwise.
        scheme: one of :data:`SCHEMES`.
        perm: None, or ``[K]`` int64: the input columns are stored in this order (stored column ``j`` is the dense
            weight's column ``perm[j]``), so ``y = x[..., perm] @ stored^T`` (act-order GPTQ,
            :func:`~anna_core.weights.prequant.act_order_perm`); :func:`dequantize` gives the stored order.
    """

    qweight: torch.Tensor
    scale: torch.Tensor
    zero: torch.Tensor | None
    scheme: str
    perm: torch.Tensor | None = None

    @property
    def shape(self) -> tuple[int, int]:
        """``(N, K)`` of the dense weight."""
        n, k = self.qweight.shape
        return (n, 2 * k) if self.scheme == "int4" else (n, k)

    @property
    def nbytes(self) -> int:
        """Bytes of the tensors (``perm`` included)."""
        return sum(t.numel() * t.element_size() for t in (self.qweight, self.scale, self.zero, self.perm)
                   if t is not None)

    def to(self, device: torch.device | str) -> QuantizedWeight:
        """The same weight with its tensors on ``device``."""
        return QuantizedWeight(*(None if t is None else t.to(device) for t in (self.qweight, self.scale, self.zero)),
                               self.scheme, None if self.perm is None else self.perm.to(device))


def check_scheme(scheme: str, op: str = "wq_linear") -> None:
    """Raises:
        ValueError: ``scheme`` is not one of :data:`SCHEMES`."""
    if scheme not in SCHEMES:
        raise ValueError(f"{op}: scheme must be one of {SCHEMES}, got {scheme!r}")


def quantizable(weight_shape: tuple[int, int], scheme: str) -> bool:
    """Whether a ``[N, K]`` weight can take ``scheme`` (int4: ``K`` a multiple of 128; int8 / fp8: any)."""
    return scheme != "int4" or weight_shape[1] % INT4_GROUP == 0


def quantize(weight: torch.Tensor, scheme: str, scale_dtype: torch.dtype = torch.bfloat16) -> QuantizedWeight:
    """Round-to-nearest quantization of ``weight`` ``[N, K]`` (any float dtype, any device; the result is on
    its device).

    Args:
        weight: the dense ``nn.Linear`` weight.
        scheme: ``"int4"``, ``"int8"`` or ``"fp8"``.
        scale_dtype: int4's scale and zero dtype (the serving dtype); int8 and fp8 scales are float32.

    Raises:
        ValueError: an unknown scheme, a weight that is not 2-D, or int4 with ``K`` not a multiple of 128.
    """
    check_scheme(scheme, "quantize")
    if weight.dim() != 2:
        raise ValueError(f"quantize: weight must be [N, K], got {tuple(weight.shape)}")
    if not quantizable(tuple(weight.shape), scheme):
        raise ValueError(f"quantize: int4 needs K a multiple of {INT4_GROUP}, got {tuple(weight.shape)}")
    w = weight.detach().float()
    if scheme == "int4":
        return _int4(w, scale_dtype)
    if scheme == "int8":
        scale = (w.abs().amax(dim=1) / 127).clamp_min(torch.finfo(torch.float32).tiny)  # [N]
        q = torch.round(w / scale[:, None]).clamp_(-127, 127).to(torch.int8)
        return QuantizedWeight(q, scale, None, "int8")
    return _fp8(w)


def _int4(w: torch.Tensor, scale_dtype: torch.dtype) -> QuantizedWeight:
    n, k = w.shape
    g = w.view(n, k // INT4_GROUP, INT4_GROUP)
    lo, hi = g.amin(dim=-1), g.amax(dim=-1)
    scale = ((hi - lo) / 15).to(scale_dtype)
    scale = torch.where(scale.float() > 0, scale, torch.ones_like(scale))  # a constant group: any scale fits
    zero = lo.to(scale_dtype)
    q = torch.round((g - zero.float()[..., None]) / scale.float()[..., None]).clamp_(0, 15).to(torch.uint8)
    q = q.view(n, k // 2, 2)
    packed = q[..., 0] | (q[..., 1] << 4)  # [N, K/2]: column 2j low, 2j + 1 high
    return QuantizedWeight(packed.contiguous(), scale.contiguous(), zero.contiguous(), "int4")


def _fp8(w: torch.Tensor) -> QuantizedWeight:
    n, k = w.shape
    nb, kb = math.ceil(n / FP8_BLOCK), math.ceil(k / FP8_BLOCK)
    padded = torch.zeros(nb * FP8_BLOCK, kb * FP8_BLOCK, device=w.device)
    padded[:n, :k] = w
    blocks = padded.view(nb, FP8_BLOCK, kb, FP8_BLOCK)
    scale = (blocks.abs().amax(dim=(1, 3)) / FP8_MAX).clamp_min(torch.finfo(torch.float32).tiny)  # [nb, kb]
    q = (blocks / scale[:, None, :, None]).clamp_(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return QuantizedWeight(q.view(nb * FP8_BLOCK, kb * FP8_BLOCK)[:n, :k].contiguous(), scale, None, "fp8")


def dequantize(qweight: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor | None, scheme: str,
               dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The dense ``[N, K]`` weight of a quantized one, computed in float32 and returned in ``dtype``.

    Raises:
        ValueError: an unknown scheme.
    """
    check_scheme(scheme, "dequantize")
    if scheme == "int4":
        n = qweight.shape[0]
        codes = torch.stack([qweight & 15, qweight >> 4], dim=-1).view(n, -1, INT4_GROUP).float()  # [N, G, 128]
        w = codes * scale.float()[..., None] + zero.float()[..., None]
        return w.view(n, -1).to(dtype)
    if scheme == "int8":
        return (qweight.float() * scale.float()[:, None]).to(dtype)
    n, k = qweight.shape
    s = scale.repeat_interleave(FP8_BLOCK, 0)[:n].repeat_interleave(FP8_BLOCK, 1)[:, :k]
    return (qweight.float() * s).to(dtype)


def dense_bytes(numel: int, dtype: torch.dtype) -> int:
    """Bytes of ``numel`` dense values of ``dtype``."""
    return numel * torch.empty((), dtype=dtype).element_size()


def quantized_bytes(n: int, k: int, scheme: str, scale_dtype: torch.dtype = torch.bfloat16) -> int:
    """Bytes a ``[N, K]`` weight takes quantized with ``scheme`` (codes and scales).

    Raises:
        ValueError: an unknown scheme.
    """
    check_scheme(scheme, "quantized_bytes")
    if scheme == "int4":
        return n * k // 2 + 2 * n * math.ceil(k / INT4_GROUP) * dense_bytes(1, scale_dtype)
    if scheme == "int8":
        return n * k + 4 * n
    return n * k + 4 * math.ceil(n / FP8_BLOCK) * math.ceil(k / FP8_BLOCK)


def quantize_stacked(weight: torch.Tensor, scheme: str, scale_dtype: torch.dtype = torch.bfloat16) -> QuantizedWeight:
    """Round-to-nearest quantization of stacked weights ``[E, N, K]`` (a MoE layer's experts), one ``[N, K]``
    slice at a time (peak extra memory: one slice's float32 copy, never all ``E`` at once); the result has the
    layout of :func:`quantize` with a leading ``E`` on each tensor (``qweight [E, ...]``, ``scale [E, ...]``,
    ``zero [E, ...]`` or None), on ``weight``'s device.

    Raises:
        ValueError: an unknown scheme, a weight that is not 3-D with ``E >= 1``, or int4 with ``K`` not a
            multiple of 128.
    """
    check_scheme(scheme, "quantize_stacked")
    if weight.dim() != 3 or weight.shape[0] < 1:
        raise ValueError(f"quantize_stacked: weight must be [E, N, K] with E >= 1, got {tuple(weight.shape)}")
    first = quantize(weight[0], scheme, scale_dtype)
    parts = [first.qweight, first.scale, first.zero]
    stacked = [None if t is None else t.new_empty((weight.shape[0], *t.shape)) for t in parts]
    for e in range(weight.shape[0]):
        q = first if e == 0 else quantize(weight[e], scheme, scale_dtype)
        for dst, src in zip(stacked, (q.qweight, q.scale, q.zero), strict=True):
            if dst is not None:
                dst[e].copy_(src)
    return QuantizedWeight(stacked[0], stacked[1], stacked[2], scheme)
