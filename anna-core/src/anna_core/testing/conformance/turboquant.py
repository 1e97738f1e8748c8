"""How the conformance suite compares a TurboQuant cache an implementation wrote with the reference's
(``OpContract.compare`` of ``turboquant_cache_write``)."""

from __future__ import annotations

from typing import Any

import torch

from anna_core.testing.conformance.compare import compare_results


def compare_written_caches(where: str, name: str, got: Any, want: Any, args: tuple, bound: float) -> None:
    """``k_cache`` / ``v_cache`` as the keys / values every row decodes to (the reference's
    ``dequantize_keys`` / ``dequantize_values``; unwritten rows decode to zeros) within ``bound`` of
    :func:`~anna_core.testing.conformance.compare.relative_error`, so norms rounded differently in their last bit
    pass and a different code does not (the contract: float32 math, ties to the lower centroid); any other
    argument by :func:`~anna_core.testing.conformance.compare.compare_results`.

    Args:
        args: the call's arguments in the signature's order (``k, v, k_cache, v_cache, slot_mapping, rotation, qjl,
            key_centroids, value_centroids``).

    Raises:
        AssertionError: the caches differ beyond that.
    """
    from anna_core.kernels.checks import keys_have_qjl
    from anna_core.kernels.reference import turboquant as ref

    if name not in ("k_cache", "v_cache"):
        compare_results(where, got, want, bound)
        return
    assert got.shape == want.shape and got.dtype == want.dtype, f"{where}: {got.shape} {got.dtype} != {want.shape}"
    rotation, qjl, key_centroids, value_centroids = (a.cpu() for a in args[5:9])
    kbits = key_centroids.numel().bit_length() - 1
    vbits = value_centroids.numel().bit_length() - 1

    def decode(cache: torch.Tensor) -> torch.Tensor:
        rows = cache.cpu().reshape(-1, cache.shape[-1])
        if name == "v_cache":
            return ref.dequantize_values(rows, rotation, value_centroids)
        if keys_have_qjl(kbits, vbits):
            return ref.dequantize_keys(rows, rotation, qjl, key_centroids)
        return ref.dequantize_values(rows, rotation, key_centroids)

    compare_results(f"{where} (decoded)", decode(got), decode(want), bound)
