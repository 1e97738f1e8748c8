"""Pre-quantized checkpoints: which format ``config.json``'s ``quantization_config`` names, and the repacking of
each format's tensors into the ``wq_linear`` layouts (:mod:`anna_core.weights.gpu_quant`) without dequantizing.

Formats (the packing rules are those the producing tools document; this module is written from them):

* **GPTQ** (``quant_method: gptq``; AutoGPTQ / GPTQModel / optimum), 4 bits: ``qweight`` ``[K/8, N]`` int32
  holds eight codes of consecutive input rows per word (row ``8i + j`` in bits ``4j .. 4j+3``); ``qzeros``
  ``[G, N/8]`` int32 holds eight zero points of consecutive output columns per word, in the same bit order;
  ``scales`` ``[G, N]`` (float16); ``g_idx`` ``[K]`` the group of each input row. The dense weight is
  ``W[n, k] = (q[k, n] - z[g, n]) * s[g, n]`` with ``g = g_idx[k]``; the original format (``checkpoint_format``
  ``gptq``, "v1") stores ``z - 1`` in ``qzeros``, GPTQModel's ``gptq_v2`` stores ``z``. Symmetric checkpoints have
  ``z = 8``. ``group_size: -1`` is one group over all of ``K``.
* **AWQ** (``quant_method: awq``, ``version: gemm``; AutoAWQ): ``qweight`` ``[K, N/8]`` int32 packs eight
  output columns per word in the interleaved order :data:`AWQ_PACK_ORDER` (the code of column ``8c +
  AWQ_PACK_ORDER[j]`` sits in bits ``4j .. 4j+3``); ``qzeros`` ``[G, N/8]`` the same way (no offset); ``scales``
  ``[G, N]``; ``W[n, k] = (q[k, n] - z[k // g, n]) * s[k // g, n]``.
* **FP8 with block scales** (``quant_method: fp8``, ``weight_block_size: [128, 128]``; Qwen's and DeepSeek's FP8
  releases): ``weight`` ``[N, K]`` float8_e4m3fn and ``weight_scale_inv`` ``[ceil(N/128), ceil(K/128)]``
  float32, ``W[n, k] = weight[n, k] * weight_scale_inv[n // 128, k // 128]``: Anna's ``fp8`` layout as is.
* **AutoRound** (``quant_method: auto-round`` / ``intel/auto-round``): its ``packing_format``
  ``auto_round:auto_gptq`` is GPTQ v1, ``auto_round:gptqmodel`` GPTQ v2, ``auto_round:auto_awq`` AWQ.

GPTQ and AWQ land in Anna's ``int4`` layout (groups of :data:`~anna_core.weights.gpu_quant.INT4_GROUP` input
columns, ``w = q * scale + zero``): ``scale = s`` and ``zero = -z * s``, rounded to the serving dtype (exact in
float32; in bfloat16 the zero's rounding adds at most ``2**-9 * |z * s|`` per weight). A group size that is a
multiple of 128 (or ``-1``) repeats its scale and zero over each 128-column group; smaller group sizes cannot be
laid out so and fail the load.

Act-order GPTQ (``desc_act: true``; the GPTQ paper's quantization "in order of decreasing activation", Frantar
et al. 2022, as AutoGPTQ / GPTQModel write it) quantizes the input columns in a permuted order, so a group's
columns are scattered over ``K`` and ``g_idx`` is not ``k // group_size``. The repack sorts the input rows by
their group once (``perm = argsort(g_idx)``, stable) so each group is contiguous again, and keeps ``perm`` with
the weight (:attr:`~anna_core.weights.gpu_quant.QuantizedWeight.perm`): the layer's GEMV reads its activations'
columns ``x[..., perm]`` (the ``wq_linear`` ops' ``perm``; kernels read them while loading their tiles). A ``g_idx`` whose groups do not hold exactly ``group_size`` rows each
fails the load naming the tensor.

Everything else (2/3/8-bit GPTQ, AWQ GEMV, bitsandbytes, per-tensor FP8, ...) fails the load naming the method.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs
import torch

from anna_core.errors import ModelLoadError
from anna_core.weights.gpu_quant import FP8_BLOCK, INT4_GROUP, QuantizedWeight

AWQ_PACK_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
"""AWQ GEMM's nibble order: nibble ``j`` of a packed word holds output column ``8c + AWQ_PACK_ORDER[j]``."""

LAYOUTS = ("gptq", "awq", "fp8")
"""Tensor layouts of pre-quantized checkpoints (:class:`PrequantConfig.layout`)."""

SUFFIXES = {"gptq": ("qweight", "qzeros", "scales", "g_idx"), "awq": ("qweight", "qzeros", "scales"),
            "fp8": ("weight", "weight_scale_inv")}
"""The tensors of one quantized linear layer ``<prefix>.<suffix>`` per layout (GPTQ's ``g_idx`` optional)."""


class UnsupportedQuantizationError(ModelLoadError):
    """A ``quantization_config`` Anna cannot serve without dequantizing (the message names the method)."""


@attrs.frozen
class PrequantConfig:
    """What a checkpoint's ``quantization_config`` says about its quantized linears.

    Attributes:
        method: the ``quant_method`` as written (``"gptq"``, ``"awq"``, ``"fp8"``, ``"auto-round"``, ...).
        layout: the tensor layout, one of :data:`LAYOUTS`.
        group_size: input columns per scale (``-1``: all of ``K``; fp8: the 128 of its blocks).
        zero_offset: what GPTQ adds to a stored zero point (1 for the v1 format, 0 for v2 and AWQ).
        skip: module names (or name fragments) that stay dense (``modules_to_not_convert``); informational, a
            layer is quantized exactly when the checkpoint holds its quantized tensors.
    """

    method: str
    layout: str
    group_size: int = INT4_GROUP
    zero_offset: int = 0
    skip: tuple[str, ...] = ()

    @property
    def scheme(self) -> str:
        """The :mod:`~anna_core.weights.gpu_quant` scheme the layers land in (``"int4"`` or ``"fp8"``)."""
        return "fp8" if self.layout == "fp8" else "int4"

    @property
    def kind(self) -> str:
        """What the layers run in, for ``/healthz``: ``"int4-gptq"``, ``"int4-awq"`` or ``"fp8-block"``."""
        return "fp8-block" if self.layout == "fp8" else f"int4-{self.layout}"

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (cache keys, ``anna quant-cache inspect``)."""
        return attrs.asdict(self)


def read_quantization_config(config: Mapping[str, Any]) -> PrequantConfig | None:
    """The pre-quantized format of a checkpoint from its ``config.json`` (``quantization_config`` at the top
    level or in ``text_config``), or None when it has none.

    Raises:
        UnsupportedQuantizationError: a method, bit width, group size, version or packing format Anna does not
            serve, or a field of the wrong type (``"group_size": null``, ``"bits": "4"``); the message names the
            method and the field.
    """
    qc = config.get("quantization_config")
    if qc is None and isinstance(config.get("text_config"), Mapping):
        qc = config["text_config"].get("quantization_config")
    if qc is None:
        return None
    if not isinstance(qc, Mapping):
        raise UnsupportedQuantizationError(f"quantization_config must be an object, got {type(qc).__name__}")
    method = _text(qc, "quant_method", "", "").lower()
    skip = _skip(qc, method)
    if method == "gptq":
        return _gptq(qc, method, _text(qc, "checkpoint_format", "gptq", method), skip)
    if method == "awq":
        return _awq(qc, method, skip)
    if method == "fp8":
        return _fp8(qc, skip)
    if method in ("auto-round", "intel/auto-round"):
        packing = _text(qc, "packing_format", "auto_round:auto_gptq", method)
        data_type = _text(qc, "data_type", "int", method)
        if data_type != "int":
            raise UnsupportedQuantizationError(f"quant_method {method!r}: data_type {data_type!r} is not "
                                               "supported (int only)")
        _check_extra_config(qc, method)
        if packing == "auto_round:auto_gptq":
            return _gptq(qc, method, "gptq", skip)
        if packing == "auto_round:gptqmodel":
            return _gptq(qc, method, "gptq_v2", skip)
        if packing == "auto_round:auto_awq":
            return _awq({**qc, "version": "gemm"}, method, skip)
        raise UnsupportedQuantizationError(f"quant_method {method!r}: packing_format {packing!r} is not supported "
                                           "(auto_round:auto_gptq, auto_round:gptqmodel, auto_round:auto_awq)")
    if not method:
        raise UnsupportedQuantizationError("quantization_config has no quant_method")
    raise UnsupportedQuantizationError(
        f"quant_method {method!r} is not supported for pre-quantized loading (Anna "
        "serves gptq and awq int4, fp8 with 128x128 block scales, and auto-round's gptq / awq exports)")


def _field_error(method: str, field: str, value: Any, want: str) -> UnsupportedQuantizationError:
    """The error for ``quantization_config.<field>`` holding ``value`` instead of ``want``."""
    where = f"quant_method {method!r}: " if method else ""
    return UnsupportedQuantizationError(f"{where}quantization_config.{field} must be {want}, got {value!r} "
                                        f"({type(value).__name__})")


def _text(qc: Mapping[str, Any], field: str, default: str, method: str) -> str:
    """The string ``qc[field]`` (``default`` when absent).

    Raises:
        UnsupportedQuantizationError: a present value that is not a string (null included).
    """
    value = qc.get(field, default)
    if not isinstance(value, str):
        raise _field_error(method, field, value, "a string")
    return value


def _int(qc: Mapping[str, Any], fields: tuple[str, ...], default: int | None, method: str,
         where: str = "") -> int | None:
    """The integer under the first of ``fields`` present in ``qc`` (``default`` when none is); ``where`` prefixes
    the field's name in the error (``extra_config['x'].``).

    Raises:
        UnsupportedQuantizationError: a present value that is not an integer (a bool, null, string or float).
    """
    for field in fields:
        if field in qc:
            value = qc[field]
            if isinstance(value, bool) or not isinstance(value, int):
                raise _field_error(method, where + field, value, "an integer")
            return value
    return default


def _skip(qc: Mapping[str, Any], method: str) -> tuple[str, ...]:
    value = qc.get("modules_to_not_convert")
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)) or not all(isinstance(m, str) for m in value):
        raise _field_error(method, "modules_to_not_convert", value, "a list of strings or null")
    return tuple(value)


def _bits4(qc: Mapping[str, Any], method: str) -> None:
    bits = _int(qc, ("bits", "w_bit"), None, method)
    if bits is None:
        raise UnsupportedQuantizationError(f"quant_method {method!r}: quantization_config has no bits (4 is "
                                           "supported)")
    if bits != 4:
        raise UnsupportedQuantizationError(f"quant_method {method!r}: {bits}-bit weights are not supported (4 only)")


def _group(qc: Mapping[str, Any], method: str) -> int:
    group = _int(qc, ("group_size", "q_group_size"), INT4_GROUP, method)
    if group != -1 and (group <= 0 or group % INT4_GROUP):
        raise UnsupportedQuantizationError(f"quant_method {method!r}: group_size {group} is not supported (a "
                                           f"multiple of {INT4_GROUP}, or -1)")
    return group


def _check_extra_config(qc: Mapping[str, Any], method: str) -> None:
    extra = qc.get("extra_config")
    if extra is None:
        return
    if not isinstance(extra, Mapping):
        raise _field_error(method, "extra_config", extra, "an object")
    bits = _int(qc, ("bits",), None, method)
    for name, layer in extra.items():
        if not isinstance(layer, Mapping):
            raise _field_error(method, f"extra_config[{name!r}]", layer, "an object")
        layer_bits = _int(layer, ("bits",), bits, method, f"extra_config[{name!r}].")
        if layer_bits is not None and layer_bits < 16 and layer_bits != bits:
            raise UnsupportedQuantizationError(f"quant_method {method!r}: extra_config gives {name!r} {layer_bits} "
                                               "bits (mixed bit widths are not supported)")


def _gptq(qc: Mapping[str, Any], method: str, checkpoint_format: str, skip: tuple[str, ...]) -> PrequantConfig:
    _bits4(qc, method)
    if checkpoint_format not in ("gptq", "gptq_v2"):
        raise UnsupportedQuantizationError(f"quant_method {method!r}: checkpoint_format {checkpoint_format!r} is "
                                           "not supported (gptq, gptq_v2)")
    if qc.get("dynamic"):
        raise UnsupportedQuantizationError(f"quant_method {method!r}: per-module 'dynamic' overrides are not "
                                           "supported")
    return PrequantConfig(method=method, layout="gptq", group_size=_group(qc, method),
                          zero_offset=1 if checkpoint_format == "gptq" else 0, skip=skip)


def _awq(qc: Mapping[str, Any], method: str, skip: tuple[str, ...]) -> PrequantConfig:
    _bits4(qc, method)
    version = _text(qc, "version", "gemm", method).lower()
    if version != "gemm":
        raise UnsupportedQuantizationError(f"quant_method {method!r}: version {version!r} is not supported (gemm)")
    zero_point = qc.get("zero_point", True)
    if not isinstance(zero_point, bool):
        raise _field_error(method, "zero_point", zero_point, "true or false")
    if not zero_point:
        raise UnsupportedQuantizationError(f"quant_method {method!r}: zero_point false is not supported")
    return PrequantConfig(method=method, layout="awq", group_size=_group(qc, method), skip=skip)


def _fp8(qc: Mapping[str, Any], skip: tuple[str, ...]) -> PrequantConfig:
    block = qc.get("weight_block_size")
    if not isinstance(block, (list, tuple)) or not all(isinstance(b, int) and not isinstance(b, bool) for b in block):
        raise _field_error("fp8", "weight_block_size", block, f"a list of two integers ([{FP8_BLOCK}, {FP8_BLOCK}])")
    if list(block) != [FP8_BLOCK, FP8_BLOCK]:
        raise UnsupportedQuantizationError(f"quant_method 'fp8': weight_block_size {list(block)} is not supported "
                                           f"([{FP8_BLOCK}, {FP8_BLOCK}] only)")
    fmt = _text(qc, "fmt", "e4m3", "fp8")
    if fmt.lower() != "e4m3":
        raise UnsupportedQuantizationError(f"quant_method 'fp8': fmt {fmt!r} is not supported (e4m3)")
    scheme = _text(qc, "activation_scheme", "dynamic", "fp8")
    if scheme != "dynamic":
        raise UnsupportedQuantizationError(f"quant_method 'fp8': activation_scheme {scheme!r} is not supported "
                                           "(dynamic)")
    return PrequantConfig(method="fp8", layout="fp8", group_size=FP8_BLOCK, skip=skip)


def _unpack_rows(packed: torch.Tensor) -> torch.Tensor:
    """``[R, C]`` int32 -> ``[8R, C]`` uint8: nibble ``j`` of word ``[i, c]`` is row ``8i + j``."""
    shifts = torch.arange(0, 32, 4, dtype=torch.int32, device=packed.device)
    nibbles = (packed[:, None, :] >> shifts[None, :, None]) & 15  # [R, 8, C]
    return nibbles.reshape(-1, packed.shape[1]).to(torch.uint8)


def _unpack_cols(packed: torch.Tensor, order: tuple[int, ...] = tuple(range(8))) -> torch.Tensor:
    """``[R, C]`` int32 -> ``[R, 8C]`` uint8: nibble ``j`` of word ``[r, c]`` is column ``8c + order[j]``."""
    shifts = torch.arange(0, 32, 4, dtype=torch.int32, device=packed.device)
    nibbles = (packed[:, :, None] >> shifts) & 15  # [R, C, 8] by nibble
    inverse = [order.index(i) for i in range(8)]
    return nibbles[:, :, inverse].reshape(packed.shape[0], -1).to(torch.uint8)


def _to_int4(prefix: str, codes: torch.Tensor, zeros: torch.Tensor, scales: torch.Tensor, group: int,
             dtype: torch.dtype, perm: torch.Tensor | None = None) -> QuantizedWeight:
    """codes ``[K, N]`` uint8 (rows in the stored order: ``perm`` applied); zeros, scales ``[G, N]`` (zeros already
    offset) -> Anna's int4 layout."""
    k, n = codes.shape
    if k % INT4_GROUP:
        raise ModelLoadError(f"{prefix}: K = {k} input columns is not a multiple of {INT4_GROUP} (Anna's int4 groups)")
    repeat = k // INT4_GROUP if group == -1 else group // INT4_GROUP
    s = scales.float().repeat_interleave(repeat, 0)[: k // INT4_GROUP]  # [K/128, N]
    z = zeros.float().repeat_interleave(repeat, 0)[: k // INT4_GROUP]
    q = codes.t().contiguous().view(n, k // 2, 2)
    packed = q[..., 0] | (q[..., 1] << 4)  # [N, K/2]: column 2j low nibble, 2j + 1 high
    scale = s.t().to(dtype).contiguous()
    zero = (-z * s).t().to(dtype).contiguous()
    return QuantizedWeight(packed.contiguous(), scale, zero, "int4", perm)


SCALE_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
"""The dtypes a checkpoint's ``scales`` / ``weight_scale_inv`` may have (others, e.g. int32, are load errors)."""

INDEX_DTYPES = (torch.int32, torch.int64)
"""The dtypes of a GPTQ ``g_idx``."""


def _check_dtype(name: str, tensor: torch.Tensor, dtypes: tuple[torch.dtype, ...]) -> None:
    if tensor.dtype not in dtypes:
        want = " or ".join(str(d).replace("torch.", "") for d in dtypes)
        raise ModelLoadError(f"{name}: dtype {str(tensor.dtype).replace('torch.', '')}, expected {want}")


def _check_finite(name: str, tensor: torch.Tensor) -> None:
    """A load error when a floating-point tensor (scales) holds NaN or infinity: its weights would be garbage."""
    if not bool(torch.isfinite(tensor).all()):
        bad = int((~torch.isfinite(tensor)).sum())
        raise ModelLoadError(f"{name}: {bad} of {tensor.numel()} values are NaN or infinite")


def _check_fp8_codes(name: str, weight: torch.Tensor) -> None:
    """A load error when a float8_e4m3fn weight holds NaN codes (``0x7F`` / ``0xFF``, the format's only non-finite
    values; a quantizer clamps to +-448): the reference would compute NaN and a kernel another value."""
    nan = (weight.view(torch.uint8) | 0x80) == 0xFF
    if bool(nan.any()):
        raise ModelLoadError(f"{name}: {int(nan.sum())} of {weight.numel()} float8_e4m3fn codes are NaN")


def _check_shape(name: str, tensor: torch.Tensor, shape: tuple[int, ...]) -> None:
    if tuple(tensor.shape) != shape:
        raise ModelLoadError(f"{name}: shape {list(tensor.shape)}, expected {list(shape)}")


def _groups(k: int, group: int) -> int:
    return 1 if group == -1 else math.ceil(k / group)


def act_order_perm(prefix: str, g_idx: torch.Tensor, group: int) -> torch.Tensor | None:
    """The input-row order that makes the groups of a GPTQ ``g_idx`` ``[K]`` contiguous: None when ``g_idx`` is
    already ``k // group_size`` (or all zeros for ``group_size -1``), else ``perm`` ``[K]`` int64 (a stable
    ``argsort(g_idx)``) with ``g_idx[perm] == arange(K) // group_size``.

    Raises:
        ModelLoadError: a ``g_idx`` (named ``<prefix>.g_idx``) whose values are outside ``[0, G)`` or whose groups
            do not hold ``group_size`` rows each.
    """
    k = g_idx.numel()
    want = torch.zeros(k, dtype=torch.long) if group == -1 else torch.arange(k) // group
    g = g_idx.long().cpu()
    if torch.equal(g, want):
        return None
    if g.min() < 0 or g.max() > want[-1]:
        raise ModelLoadError(f"{prefix}.g_idx: group indices in [{int(g.min())}, {int(g.max())}], expected "
                             f"[0, {int(want[-1])}] for K = {k} and group_size {group}")
    perm = torch.argsort(g, stable=True)
    if not torch.equal(g[perm], want):
        counts = torch.bincount(g, minlength=int(want[-1]) + 1)
        bad = int(torch.nonzero(counts != (k if group == -1 else group))[0])
        raise ModelLoadError(f"{prefix}.g_idx: group {bad} holds {int(counts[bad])} input rows, expected "
                             f"{k if group == -1 else group} (group_size {group}): not a GPTQ act-order g_idx")
    return perm


def repack_gptq(prefix: str, qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor,
                g_idx: torch.Tensor | None, cfg: PrequantConfig, dtype: torch.dtype) -> QuantizedWeight:
    """One GPTQ linear (tensors as in the module docstring) in Anna's int4 layout, scales in ``dtype``; an
    act-order ``g_idx`` gives the result a ``perm`` (:func:`act_order_perm`), its rows sorted by group.

    Raises:
        ModelLoadError: ``qweight`` / ``qzeros`` not int32, ``scales`` not float16 / bfloat16 / float32, ``g_idx``
            not int32 / int64, tensors of inconsistent shapes, or a ``g_idx`` inconsistent with the group size
            (see :func:`act_order_perm`).
    """
    if qweight.dtype != torch.int32 or qzeros.dtype != torch.int32:
        raise ModelLoadError(f"{prefix}: GPTQ qweight / qzeros must be int32, got {qweight.dtype} / {qzeros.dtype}")
    if qweight.dim() != 2:
        raise ModelLoadError(f"{prefix}.qweight: expected a 2-D tensor, got shape {list(qweight.shape)}")
    k, n = qweight.shape[0] * 8, qweight.shape[1]
    g = _groups(k, cfg.group_size)
    _check_shape(f"{prefix}.qzeros", qzeros, (g, n // 8))
    _check_shape(f"{prefix}.scales", scales, (g, n))
    _check_dtype(f"{prefix}.scales", scales, SCALE_DTYPES)
    _check_finite(f"{prefix}.scales", scales)
    perm = None
    if g_idx is not None:
        _check_shape(f"{prefix}.g_idx", g_idx, (k,))
        _check_dtype(f"{prefix}.g_idx", g_idx, INDEX_DTYPES)
        perm = act_order_perm(prefix, g_idx, cfg.group_size)
    codes = _unpack_rows(qweight)
    if perm is not None:
        codes = codes.index_select(0, perm.to(codes.device))
    zeros = _unpack_cols(qzeros).to(torch.int32) + cfg.zero_offset
    return _to_int4(prefix, codes, zeros, scales, cfg.group_size, dtype, perm)


def repack_awq(prefix: str, qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor,
               cfg: PrequantConfig, dtype: torch.dtype) -> QuantizedWeight:
    """One AWQ GEMM linear in Anna's int4 layout, scales in ``dtype``.

    Raises:
        ModelLoadError: ``qweight`` / ``qzeros`` not int32, ``scales`` not float16 / bfloat16 / float32, or
            inconsistently shaped tensors.
    """
    if qweight.dtype != torch.int32 or qzeros.dtype != torch.int32:
        raise ModelLoadError(f"{prefix}: AWQ qweight / qzeros must be int32, got {qweight.dtype} / {qzeros.dtype}")
    if qweight.dim() != 2:
        raise ModelLoadError(f"{prefix}.qweight: expected a 2-D tensor, got shape {list(qweight.shape)}")
    k, n = qweight.shape[0], qweight.shape[1] * 8
    g = _groups(k, cfg.group_size)
    _check_shape(f"{prefix}.qzeros", qzeros, (g, n // 8))
    _check_shape(f"{prefix}.scales", scales, (g, n))
    _check_dtype(f"{prefix}.scales", scales, SCALE_DTYPES)
    _check_finite(f"{prefix}.scales", scales)
    codes = _unpack_cols(qweight, AWQ_PACK_ORDER)
    zeros = _unpack_cols(qzeros, AWQ_PACK_ORDER).to(torch.int32)
    return _to_int4(prefix, codes, zeros, scales, cfg.group_size, dtype)


def repack_fp8(prefix: str, weight: torch.Tensor, weight_scale_inv: torch.Tensor) -> QuantizedWeight:
    """One FP8 block-scaled linear in Anna's fp8 layout (the same tensors; the scales made float32).

    Raises:
        ModelLoadError: a weight that is not float8_e4m3fn ``[N, K]`` or holds NaN codes, or scales not float16 /
            bfloat16 / float32 ``[ceil(N/128), ceil(K/128)]`` or not finite.
    """
    if weight.dtype != torch.float8_e4m3fn or weight.dim() != 2:
        raise ModelLoadError(f"{prefix}.weight: expected a 2-D float8_e4m3fn tensor, got {weight.dtype} "
                             f"{list(weight.shape)}")
    n, k = weight.shape
    _check_shape(f"{prefix}.weight_scale_inv", weight_scale_inv, (math.ceil(n / FP8_BLOCK), math.ceil(k / FP8_BLOCK)))
    _check_dtype(f"{prefix}.weight_scale_inv", weight_scale_inv, SCALE_DTYPES)
    _check_finite(f"{prefix}.weight_scale_inv", weight_scale_inv)
    _check_fp8_codes(f"{prefix}.weight", weight)
    return QuantizedWeight(weight.contiguous(), weight_scale_inv.float().contiguous(), None, "fp8")


def repack(prefix: str, tensors: Mapping[str, torch.Tensor], cfg: PrequantConfig,
           dtype: torch.dtype) -> QuantizedWeight:
    """The linear ``prefix`` of the checkpoint from its tensors ``{suffix: tensor}`` (:data:`SUFFIXES`).

    Raises:
        ModelLoadError: a missing tensor, or see :func:`repack_gptq`, :func:`repack_awq`, :func:`repack_fp8`.
    """
    required = [s for s in SUFFIXES[cfg.layout] if s != "g_idx"]
    missing = [f"{prefix}.{s}" for s in required if s not in tensors]
    if missing:
        raise ModelLoadError(f"{cfg.method} checkpoint: missing tensors {missing}")
    if cfg.layout == "gptq":
        return repack_gptq(prefix, tensors["qweight"], tensors["qzeros"], tensors["scales"], tensors.get("g_idx"),
                           cfg, dtype)
    if cfg.layout == "awq":
        return repack_awq(prefix, tensors["qweight"], tensors["qzeros"], tensors["scales"], cfg, dtype)
    return repack_fp8(prefix, tensors["weight"], tensors["weight_scale_inv"])


def source_tensor(cfg: PrequantConfig) -> str:
    """The suffix of the checkpoint tensor whose shape fixes a linear's repacked layout (:func:`repacked_layout`):
    ``"qweight"`` (GPTQ, AWQ) or ``"weight"`` (fp8)."""
    return "weight" if cfg.layout == "fp8" else "qweight"


def repacked_layout(source_shape: tuple[int, ...], cfg: PrequantConfig,
                    dtype: torch.dtype) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """The tensors :func:`repack` makes of a linear whose :func:`source_tensor` has ``source_shape``, as
    ``{"qweight" | "scale" | "zero": (shape, dtype)}`` (see :class:`~anna_core.weights.gpu_quant.QuantizedWeight`):
    int4 ``qweight [N, K/2]`` uint8 with ``scale`` and ``zero`` ``[N, K/128]`` in ``dtype``; fp8 ``qweight [N, K]``
    float8_e4m3fn and ``scale [ceil(N/128), ceil(K/128)]`` float32. The layout cache checks its entries by it.

    Raises:
        ModelLoadError: a ``source_shape`` that is not 2-D.
    """
    if len(source_shape) != 2:
        raise ModelLoadError(f"{cfg.method} checkpoint: a 2-D {source_tensor(cfg)} expected, got {list(source_shape)}")
    if cfg.layout == "fp8":
        n, k = source_shape
        return {"qweight": ((n, k), torch.float8_e4m3fn),
                "scale": ((math.ceil(n / FP8_BLOCK), math.ceil(k / FP8_BLOCK)), torch.float32)}
    k, n = (source_shape[0] * 8, source_shape[1]) if cfg.layout == "gptq" else (source_shape[0], source_shape[1] * 8)
    groups = (n, k // INT4_GROUP)
    return {"qweight": ((n, k // 2), torch.uint8), "scale": (groups, dtype), "zero": (groups, dtype)}


def quantized_prefixes(names: list[str] | Mapping[str, Any], cfg: PrequantConfig) -> list[str]:
    """The checkpoint names of the quantized linears (``model.layers.0.self_attn.q_proj``), in file order: those
    with a ``qweight`` (GPTQ, AWQ) or a ``weight_scale_inv`` (fp8)."""
    marker = ".weight_scale_inv" if cfg.layout == "fp8" else ".qweight"
    return [name[: -len(marker)] for name in names if name.endswith(marker)]
