"""``wq_linear`` and ``add_rms_norm_wq_linear``: linear layers whose weight is quantized for accelerators
(:mod:`anna_core.weights.gpu_quant`: int4 groups of 128, int8 per channel, FP8 with 128x128 block scales).

The references dequantize the weight to float32 and multiply in float32 (one rounding of the result to x's
dtype), on any device: the CPU and any backend without a kernel for a scheme fall back to them. Kernels
(anna-xpu-kernels' Triton GEMV) dequantize in registers and accumulate in float32, so they agree with these
to float32 summation order.

Both ops take an optional ``perm`` ``[K]`` (int32 / int64): the weight's input columns are stored in that order
(act-order GPTQ, :attr:`anna_core.weights.gpu_quant.QuantizedWeight.perm`), so the product reads ``x[..., perm]``;
a kernel gathers the columns as it loads its activation tiles (no separate gather). ``perm`` must be a
permutation of ``range(K)``: it is checked where it is made (at load, :func:`anna_core.weights.prequant.
act_order_perm`, and when read from the layout cache), not per call (that would read it on the host).
"""

from __future__ import annotations

import math

import torch

from anna_core.kernels.checks import check_gated_activation, require
from anna_core.kernels.reference.activations import act_and_mul
from anna_core.kernels.reference.norms import add_rms_norm
from anna_core.weights.gpu_quant import FP8_BLOCK, INT4_GROUP, SCHEMES, dequantize

_CODE_DTYPES = {"int4": torch.uint8, "int8": torch.int8, "fp8": torch.float8_e4m3fn}


def weight_shape(qweight: torch.Tensor, scheme: str) -> tuple[int, int]:
    """``(N, K)`` of the dense weight ``qweight`` stands for."""
    n, k = qweight.shape
    return (n, 2 * k) if scheme == "int4" else (n, k)


def check_wq_weight(op: str, qweight: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor | None,
                    scheme: str) -> tuple[int, int]:
    """Check a quantized weight's tensors against its scheme's layout (shapes and dtypes only, no sync);
    returns ``(N, K)``.

    Raises:
        ValueError: an unknown scheme, or a tensor whose shape or dtype is not the scheme's.
    """
    require(scheme in SCHEMES, op, f"scheme must be one of {SCHEMES}, got {scheme!r}")
    require(qweight.dim() == 2 and qweight.dtype == _CODE_DTYPES[scheme], op,
            f"qweight must be 2-D {_CODE_DTYPES[scheme]} for {scheme}, got {tuple(qweight.shape)} {qweight.dtype}")
    n, k = weight_shape(qweight, scheme)
    if scheme == "int4":
        groups = k // INT4_GROUP
        require(k % INT4_GROUP == 0, op, f"int4 needs K a multiple of {INT4_GROUP}, got K={k}")
        require(tuple(scale.shape) == (n, groups) and zero is not None and tuple(zero.shape) == (n, groups)
                and zero.dtype == scale.dtype and scale.is_floating_point(), op,
                f"int4 scale and zero must be [N={n}, K/128={groups}] of one float dtype, got "
                f"{tuple(scale.shape)} {scale.dtype} and {None if zero is None else (tuple(zero.shape), zero.dtype)}")
    elif scheme == "int8":
        require(tuple(scale.shape) == (n,) and scale.dtype == torch.float32 and zero is None, op,
                f"int8 scale must be [N={n}] float32 and zero None, got {tuple(scale.shape)} {scale.dtype}")
    else:
        blocks = (math.ceil(n / FP8_BLOCK), math.ceil(k / FP8_BLOCK))
        require(tuple(scale.shape) == blocks and scale.dtype == torch.float32 and zero is None, op,
                f"fp8 scale must be [ceil(N/128), ceil(K/128)] = {list(blocks)} float32 and zero None, got "
                f"{tuple(scale.shape)} {scale.dtype}")
    return n, k


PERM_DTYPES = (torch.int32, torch.int64)
"""The dtypes of a ``perm`` (kernels read int32 ones with half the bytes)."""


def check_wq_linear(x: torch.Tensor, qweight: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor | None,
                    scheme: str, bias: torch.Tensor | None, perm: torch.Tensor | None = None) -> None:
    """Check :func:`wq_linear`'s arguments (shapes and dtypes only, no sync).

    Raises:
        ValueError: ``"wq_linear: ..."``: see :func:`check_wq_weight`; x not ``[..., K]`` of a float dtype; bias
            not ``[N]`` of x's dtype or None; perm not ``[K]`` int32 / int64 on x's device or None.
    """
    _check_x_and_weight("wq_linear", x, qweight, scale, zero, scheme, bias, perm)


def _check_x_and_weight(op: str, x: torch.Tensor, qweight: torch.Tensor, scale: torch.Tensor,
                        zero: torch.Tensor | None, scheme: str, bias: torch.Tensor | None,
                        perm: torch.Tensor | None) -> None:
    n, k = check_wq_weight(op, qweight, scale, zero, scheme)
    require(x.dim() >= 1 and x.shape[-1] == k and x.is_floating_point(), op,
            f"x must be a float [M, K={k}], got {tuple(x.shape)} {x.dtype}")
    require(bias is None or (tuple(bias.shape) == (n,) and bias.dtype == x.dtype), op,
            f"bias must be [N={n}] of x's dtype or None, got {None if bias is None else (tuple(bias.shape), bias.dtype)}")
    if perm is not None and (tuple(perm.shape) != (k,) or perm.dtype not in PERM_DTYPES or perm.device != x.device):
        raise ValueError(f"{op}: perm must be [K={k}] int32 or int64 on x's device {x.device} or None, got "
                         f"{tuple(perm.shape)} {perm.dtype} on {perm.device}")


def wq_linear(x: torch.Tensor, qweight: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor | None, scheme: str,
              bias: torch.Tensor | None, perm: torch.Tensor | None = None) -> torch.Tensor:
    """``x[..., perm] @ w^T + bias`` with ``w`` the dequantized weight (:func:`~anna_core.weights.gpu_quant.dequantize`).

    Args:
        x: ``[M, K]`` (or ``[..., K]``) float activations.
        qweight, scale, zero, scheme: the quantized ``[N, K]`` weight (:mod:`anna_core.weights.gpu_quant`).
        bias: ``[N]`` of x's dtype, or None.
        perm: None, or ``[K]`` int32 / int64, a permutation of ``range(K)``: the weight's stored column order
            (the module docstring).

    Returns:
        ``[..., N]`` in x's dtype: the product and bias in float32, rounded once.

    Raises:
        ValueError: see :func:`check_wq_linear`.
    """
    check_wq_linear(x, qweight, scale, zero, scheme, bias, perm)
    if perm is not None:
        x = x.index_select(-1, perm)
    w = dequantize(qweight, scale, zero, scheme, torch.float32)
    y = x.float() @ w.T
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype)


def check_add_rms_norm_wq_linear(x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor, eps: float,
                                 zero_centered: bool, qweight: torch.Tensor, scale: torch.Tensor,
                                 zero: torch.Tensor | None, scheme: str, activation: str | None = None,
                                 perm: torch.Tensor | None = None) -> None:
    """Check :func:`add_rms_norm_wq_linear`'s arguments (shapes and dtypes only, no sync).

    Raises:
        ValueError: ``"add_rms_norm_wq_linear: ..."`` as :func:`check_wq_linear`; residual not x's shape and
            dtype (or None); norm_weight not ``[K]``; an unknown activation, or one with an odd ``N``.
    """
    op = "add_rms_norm_wq_linear"
    _check_x_and_weight(op, x, qweight, scale, zero, scheme, None, perm)
    n, k = weight_shape(qweight, scheme)
    require(norm_weight.dim() == 1 and norm_weight.shape[0] == k, op,
            f"norm_weight must be [K={k}], got {tuple(norm_weight.shape)}")
    require(residual is None or (residual.shape == x.shape and residual.dtype == x.dtype), op,
            f"residual must match x's shape {tuple(x.shape)} and dtype {x.dtype}")
    if activation is not None:
        check_gated_activation(op, activation)
        require(n % 2 == 0, op, f"with an activation the weight must be [2I, K] (gate rows, then up rows), N={n}")


def add_rms_norm_wq_linear(x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor, eps: float,
                           zero_centered: bool, qweight: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor | None,
                           scheme: str, activation: str | None = None,
                           perm: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Residual add, RMSNorm, then a quantized bias-free projection (and, with an activation, the gated
    product of a merged gate/up projection): ``add_rms_norm_linear`` / ``add_rms_norm_linear_act_mul`` with a
    quantized weight (whose input columns may be stored in the order ``perm``: the normalised row is read as
    ``h[..., perm]``; the norm's statistic is over the whole row, so the order does not change it).

    Args:
        x, residual: ``[M, K]``, one dtype (residual None: ``new_residual = x``); norm_weight ``[K]``; eps;
            zero_centered: as :func:`~anna_core.kernels.reference.norms.add_rms_norm`.
        qweight, scale, zero, scheme: the quantized ``[N, K]`` weight (``[2I, K]``, gate rows then up rows,
            with an activation).
        activation: None, ``"silu"`` or ``"gelu_tanh"``.
        perm: None, or ``[K]`` int32 / int64 as :func:`wq_linear` takes it.

    Returns:
        ``(y, new_residual)``: ``(h, new_residual) = add_rms_norm(x, residual, ...)``, ``y = wq_linear(h, ..., perm)``
        ``[M, N]`` (then ``act_and_mul(y, activation)`` ``[M, I]``), rounded as those ops round.

    Raises:
        ValueError: see :func:`check_add_rms_norm_wq_linear`.
    """
    check_add_rms_norm_wq_linear(x, residual, norm_weight, eps, zero_centered, qweight, scale, zero, scheme, activation,
                                 perm)
    h, new_residual = add_rms_norm(x, residual, norm_weight, eps, zero_centered)
    y = wq_linear(h, qweight, scale, zero, scheme, None, perm)
    return (y if activation is None else act_and_mul(y, activation)), new_residual
