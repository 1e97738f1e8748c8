"""``top_k_gumbel_sample``: a code drawn from temperature- and top-k-filtered logits by the Gumbel-max trick, with
the noise given, so a captured graph samples without a host sync.

The Gumbel-max trick (Gumbel 1954; e.g. Maddison, Tarlow & Minka 2014, "A* Sampling"): with ``u ~ U(0, 1)`` drawn
per logit, ``argmax(scores - log(-log(u)))`` picks each id with probability ``softmax(scores)`` -- the draw a
multinomial sample makes, from other random numbers. The filter is transformers' order (temperature, then top-k;
ids below the ``k``-th largest score are dropped, ties with it kept).
"""

from __future__ import annotations

import math
import struct

import torch

from anna_core.kernels.checks import require


def _float32(x: float) -> float:
    """``x`` rounded to float32 (to nearest even; overflow to infinity), as a Python float."""
    try:
        return struct.unpack("f", struct.pack("f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def temperature_reciprocal(temperature: float) -> float:
    """``float32(1 / float32(temperature))`` as a Python float: the factor the scores are multiplied by (what
    torch's CUDA kernels compute for a division by a Python float, and what :func:`top_k_gumbel_sample` and its
    kernels compute on every device, so that they pick the same ids everywhere). Computed on the host without a
    tensor (the quotient in float64 rounded to float32 is the float32 quotient: 53 >= 2 * 24 + 2 bits)."""
    t = _float32(temperature)
    return _float32(1.0 / t) if t != 0 else math.inf


def usable_temperature(temperature: float) -> bool:
    """Whether ``temperature`` is a positive number (not a bool) whose float32 reciprocal
    (:func:`temperature_reciprocal`) is a normal float32: about ``8.5e-39 < t < 8.5e37``."""
    if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or not temperature > 0:
        return False
    inverse = temperature_reciprocal(temperature)
    return math.isfinite(inverse) and inverse >= torch.finfo(torch.float32).tiny


def top_k_scores(logits: torch.Tensor, temperature: float, top_k: int) -> torch.Tensor:
    """The tempered float32 scores ``float32(logits) * temperature_reciprocal(temperature)`` ``[..., V]`` with the
    ids below the ``top_k``-th largest at ``-inf`` (ties kept; 0 or ``>= V``: no filter): transformers' order, the
    first two steps of :func:`top_k_gumbel_sample` (and of any sampler that filters further, e.g. by top-p)."""
    scores = logits.float() * temperature_reciprocal(temperature)
    if 0 < top_k < scores.shape[-1]:
        kth = torch.topk(scores, top_k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    return scores


def check_top_k_gumbel_sample(logits: torch.Tensor, noise: torch.Tensor, temperature: float, top_k: int) -> float:
    """Check :func:`top_k_gumbel_sample`'s arguments (shapes and dtypes only, no sync); returns the temperature's
    float32 reciprocal (:func:`temperature_reciprocal`), the factor implementations multiply the scores by.

    Raises:
        ValueError: ``"top_k_gumbel_sample: ..."``: logits not a float ``[M, V]`` with ``V >= 1`` and unit stride
            along V; noise not float32 of logits' shape on its device with unit stride along V; temperature not a
            positive number whose float32 reciprocal is a normal float32 (about ``8.5e-39 < t < 8.5e37``); top_k not
            an int ``>= 0``.
    """
    op = "top_k_gumbel_sample"
    require(logits.dim() == 2 and logits.is_floating_point() and logits.shape[1] >= 1, op,
            f"logits must be a float [M, V] with V >= 1, got {tuple(logits.shape)} {logits.dtype}")
    require(logits.stride(1) == 1 or logits.shape[1] == 1, op, "logits must have unit stride along V")
    require(noise.shape == logits.shape and noise.dtype == torch.float32 and noise.device == logits.device, op,
            f"noise must be float32 {tuple(logits.shape)} on {logits.device}, got {tuple(noise.shape)} "
            f"{noise.dtype} on {noise.device}")
    require(noise.stride(1) == 1 or noise.shape[1] == 1, op, "noise must have unit stride along V")
    number = isinstance(temperature, (int, float)) and not isinstance(temperature, bool)
    require(number and temperature > 0, op, f"temperature must be a positive number, got {temperature!r}")
    require(usable_temperature(temperature), op, f"temperature must have a normal float32 reciprocal, got {temperature!r}")
    require(isinstance(top_k, int) and not isinstance(top_k, bool) and top_k >= 0, op,
            f"top_k must be an int >= 0, got {top_k!r}")
    return temperature_reciprocal(temperature)


def top_k_gumbel_sample(logits: torch.Tensor, noise: torch.Tensor, temperature: float, top_k: int) -> torch.Tensor:
    """One id per row drawn from ``softmax(top_k(logits / temperature))`` with the given Gumbel noise.

    Args:
        logits: ``[M, V]`` float32 / float16 / bfloat16 (unit stride along V, any row stride).
        noise: ``[M, V]`` float32, the finite ``log(-log(u))``, ``u ~ U(0, 1)``, that is subtracted from the scores.
        temperature: a positive Python float.
        top_k: keep the ``top_k`` largest scores of a row (and any equal to the ``top_k``-th); 0 or ``>= V``: all.

    Returns:
        ``[M]`` int64: ``argmax(scores - noise)``, the first column among equal largest values, where ``scores =
        float32(logits) * float32(1 / float32(temperature))`` (:func:`temperature_reciprocal`) with the
        filtered-out ids at ``-inf``.

    Raises:
        ValueError: see :func:`check_top_k_gumbel_sample`.
    """
    check_top_k_gumbel_sample(logits, noise, temperature, top_k)
    return (top_k_scores(logits, temperature, top_k) - noise).argmax(dim=-1)
