"""Shared helpers of the Triton-interpreter kernel tests."""

from __future__ import annotations

import os
import subprocess
import sys

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


NOT_INTERPRETED: list[str] = []
"""Test modules skipped because triton was imported before the interpreter could be set up."""


def require_triton_interpreter() -> None:
    """Skip the calling test module unless triton is installed and interpreting (the latter recorded in
    :data:`NOT_INTERPRETED`, which fails the session)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        pytest.skip("triton is not installed (pip install 'anna-xpu-kernels[gpu]' or triton==3.6.0)",
                    allow_module_level=True)
    if os.environ.get("TRITON_INTERPRET") != "1":
        # skipped (a failure at import would abort the whole session's collection), but recorded:
        # tests/xpu_kernels/conftest.py fails the session, since a skip here once hid every kernel test of the
        # whole-suite run (a test module elsewhere imported triton at collection)
        NOT_INTERPRETED.append(sys._getframe(1).f_globals.get("__name__", "?"))
        pytest.skip("triton was imported before tests/xpu_kernels/conftest.py could set TRITON_INTERPRET=1 (a test "
                    "module collected earlier imports it at module level); run this folder on its own",
                    allow_module_level=True)


def tol(dtype) -> dict[str, float]:
    """``{"atol": ..., "rtol": ...}`` for a torch dtype."""
    return TOLERANCES[str(dtype).replace("torch.", "")]


def run_microbench_smoke(*args: str) -> subprocess.CompletedProcess:
    """``python -m anna_xpu_kernels.microbench --device cpu --smoke ARGS`` under the interpreter
    (stdout / stderr captured as text; 300 s limit)."""
    env = dict(os.environ, ANNA_TRITON_INTERPRET="1", TRITON_INTERPRET="1")
    return subprocess.run([sys.executable, "-m", "anna_xpu_kernels.microbench", "--device", "cpu", "--smoke", *args],
                          check=False, capture_output=True, text=True, env=env, timeout=300)


def gemv_configs():
    """``(name, GemvConfig or None)`` cases covering each GEMV path (None: the autotuner's choice,
    the fixed one when interpreting). Imports the kernels: call after :func:`require_triton_interpreter`."""
    from anna_xpu_kernels.gemv import GemvConfig

    return [
        ("auto", None),
        ("cuda-cores", GemvConfig(block_n=16, block_k=32, split_k=1, use_dot=False)),
        ("cuda-cores split-K", GemvConfig(block_n=16, block_k=16, split_k=3, use_dot=False)),
        ("tensor-cores", GemvConfig(block_n=32, block_k=32, split_k=1, use_dot=True)),
        ("tensor-cores split-K", GemvConfig(block_n=16, block_k=16, split_k=2, use_dot=True)),
    ]
