"""Shared helpers of the Triton-interpreter kernel tests."""

from __future__ import annotations

import os

import pytest

# Tolerances per activation dtype. float32: kernels and references both compute in float32, only the
# summation order differs. bfloat16: Triton 3.6's interpreter rounds float32 -> bfloat16 toward zero
# (numpy has no bfloat16), torch rounds to nearest, so results may differ by one bfloat16 ulp
# (2**-7 relative), plus attention rounds its probabilities to bfloat16 before the P @ V product.
TOLERANCES = {
    "float32": {"atol": 2e-5, "rtol": 2e-5},
    "float16": {"atol": 2e-3, "rtol": 2e-3},
    "bfloat16": {"atol": 2e-2, "rtol": 2e-2},
}


def require_triton_interpreter() -> None:
    """Skip the calling test module unless triton is installed and interpreting."""
    try:
        import triton  # noqa: F401
    except ImportError:
        pytest.skip("triton is not installed (pip install 'anna-xpu-kernels[gpu]' or triton==3.6.0)",
                    allow_module_level=True)
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("triton was imported before tests/xpu_kernels/conftest.py could set TRITON_INTERPRET=1; "
                    "run this folder on its own", allow_module_level=True)


def tol(dtype) -> dict[str, float]:
    """``{"atol": ..., "rtol": ...}`` for a torch dtype."""
    return TOLERANCES[str(dtype).replace("torch.", "")]
