"""``top_k_gumbel_sample`` in Triton: temperature, top-k filter and the Gumbel-max draw of a row in one launch.

Math (the op's contract, :func:`anna_core.kernels.reference.sampling.top_k_gumbel_sample`): ``scores =
float32(logits) * r`` with ``r`` the temperature's float32 reciprocal
(:func:`~anna_core.kernels.reference.sampling.temperature_reciprocal`, which the argument check returns: one IEEE
float32 product, as the reference's),
the ``k``-th largest score found by ``tl.topk`` (a bitonic partial sort of the row in registers) and
every score below it set to ``-inf``, then the first column of the largest ``scores - noise``. One program per row
holds the whole row (``V`` up to :data:`MAX_VOCAB`); a wider vocabulary or a ``top_k`` above :data:`MAX_TOP_K`
runs the torch reference. Where the composition launches seven kernels a row batch (the float conversion, tempering,
``topk``, comparison, fill, subtraction, argmax), this is one: a code predictor sampling 15 codebooks a frame
(Qwen3-TTS) pays one launch a codebook.
"""

from __future__ import annotations

import torch
from anna_core.kernels.reference.sampling import check_top_k_gumbel_sample
from anna_core.kernels.reference.sampling import top_k_gumbel_sample as reference

from anna_xpu_kernels import pdl
from anna_xpu_kernels._checks import require_same_device
from anna_xpu_kernels._triton import next_pow2, tl, triton

MAX_VOCAB = 8192
"""Most ids a row may have for the kernel (one program holds the row in registers)."""

MAX_TOP_K = 256
"""Largest filtering ``top_k`` the kernel sorts for (the partial sort's width)."""


@triton.jit
def _top_k_gumbel_kernel(logits_ptr, noise_ptr, ids_ptr, V, stride_l, stride_n, inv_temperature, top_k,
                         BLOCK: tl.constexpr, K: tl.constexpr, FILTER: tl.constexpr, USE_PDL: tl.constexpr):
    pdl.enter(USE_PDL)
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    ok = cols < V
    x = tl.load(logits_ptr + row * stride_l + cols, mask=ok, other=0.0).to(tl.float32)
    scores = tl.where(ok, x * inv_temperature, float("-inf"))
    if FILTER:
        if K == 1:
            kth = tl.max(scores, axis=0)
        else:
            top = tl.topk(scores, K)  # descending
            kth = tl.max(tl.where(tl.arange(0, K) == top_k - 1, top, float("-inf")), axis=0)
        scores = tl.where(scores < kth, float("-inf"), scores)
    g = tl.load(noise_ptr + row * stride_n + cols, mask=ok, other=0.0)
    drawn = tl.where(ok, scores - g, float("-inf"))
    _, at = tl.max(drawn, axis=0, return_indices=True, return_indices_tie_break_left=True)
    tl.store(ids_ptr + row, at.to(tl.int64))


def top_k_gumbel_sample(logits: torch.Tensor, noise: torch.Tensor, temperature: float, top_k: int) -> torch.Tensor:
    """Signature of the reference ``top_k_gumbel_sample`` (one launch; module doc).

    Args:
        logits: ``[M, V]`` float32 / float16 / bfloat16, unit stride along V; noise: ``[M, V]`` float32, unit stride
            along V; temperature: positive; top_k: ``>= 0`` (0 or ``>= V``: no filter).

    Returns:
        ``[M]`` int64 ids.

    Raises:
        ValueError: as the reference (``"top_k_gumbel_sample: ..."``), or tensors on different devices.
    """
    inverse = check_top_k_gumbel_sample(logits, noise, temperature, top_k)
    require_same_device("top_k_gumbel_sample", logits=logits, noise=noise)
    m, v = logits.shape
    filtering = 0 < top_k < v
    if v > MAX_VOCAB or (filtering and top_k > MAX_TOP_K):
        return reference(logits, noise, temperature, top_k)
    out = torch.empty((m,), dtype=torch.int64, device=logits.device)
    if m:  # enable_fp_fusion=False: the product rounds before the subtraction (no FMA), as the reference's two ops
        block = next_pow2(v)
        _top_k_gumbel_kernel[(m,)](logits, noise, out, v, logits.stride(0), noise.stride(0), inverse, int(top_k), BLOCK=block, K=next_pow2(top_k) if filtering else 1,
                                   FILTER=filtering, num_warps=8 if block > 2048 else 4, enable_fp_fusion=False,
                                   **pdl.launch_options(logits))
    return out
