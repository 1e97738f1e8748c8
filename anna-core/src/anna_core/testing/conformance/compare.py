"""How the conformance suites compare a result with the reference."""

from __future__ import annotations

from typing import Any

import torch


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """``max |a - b|`` over ``b``'s value range (float32); 0 when both are empty."""
    a, b = a.float(), b.float()
    if b.numel() == 0:
        return 0.0
    span = float(b.max() - b.min()) or 1.0
    return float((a - b).abs().max()) / span


def compare_results(where: str, got: Any, want: Any, bound: float) -> None:
    """``got`` equals ``want``: tensors of one shape and dtype, floats within ``bound`` of
    :func:`relative_error` (NaN where and only where the reference has one), others exactly; tuples item by
    item; anything else by ``==``."""
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{where}: got {type(got).__name__}, want a tensor"
        assert got.shape == want.shape, f"{where}: shape {tuple(got.shape)}, want {tuple(want.shape)}"
        assert got.dtype == want.dtype, f"{where}: dtype {got.dtype}, want {want.dtype}"
        got, want = got.cpu(), want.cpu()
        if not want.is_floating_point():
            assert torch.equal(got, want), f"{where}: {got.tolist()} != {want.tolist()}"
            return
        nan = want.isnan()
        assert torch.equal(got.isnan(), nan), f"{where}: NaN where the reference has none, or none where it has"
        err = relative_error(got[~nan], want[~nan])
        assert err <= bound, f"{where}: relative error {err:.3g} > {bound:.3g} (max |diff| over the reference's range)"
    elif isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want), f"{where}: got {got!r}, want {len(want)} items"
        for i, (g, w) in enumerate(zip(got, want)):
            compare_results(f"{where}[{i}]", g, w, bound)
    else:
        assert got == want, f"{where}: got {got!r}, want {want!r}"
