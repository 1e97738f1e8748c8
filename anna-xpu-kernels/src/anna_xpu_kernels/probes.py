"""Availability probes of the anna-xpu-kernels implementations: ``probe(ProbeRequest) -> bool``.

A probe accepts a request when the device can run the implementation and the dtype and the static
shape facts it was given are supported; it never raises for an unavailable device (the kernel
registry treats a raising probe as a decline, but these decline quietly). Importing this module
imports neither torch, triton nor fla; the probes import them when first asked.

Devices:
    ``cuda``: ``torch.cuda.is_available()`` and triton importable with its NVIDIA (or AMD) backend.
    ``xpu``: ``torch.xpu.is_available()`` and triton importable with the Intel backend
        (``triton.backends.backends`` has ``"intel"``; PyTorch's XPU wheels ship it).
    ``cpu``: only with ``ANNA_TRITON_INTERPRET=1`` (Triton's interpreter; tests and debugging).
Shape facts (``ProbeRequest.shape``; absent keys are not checked, the implementations fall back to
the torch reference themselves for shapes they cannot hold in registers):
    ``head_dim`` (attention, GDN), ``head_k_dim`` / ``head_v_dim`` (GDN): at most 256;
    ``dim`` / ``hidden_size`` (norms): at most 16384.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

from anna_xpu_kernels._env import cpu_interpret_requested

TRITON_DTYPES = ("float32", "float16", "bfloat16")
FLA_DTYPES = ("float16", "bfloat16")
MAX_HEAD_DIM = 256
MAX_NORM_DIM = 16384


@functools.cache
def _triton_backends() -> frozenset[str]:
    """Names of triton's installed backends (empty when triton does not import)."""
    try:
        from triton.backends import backends
    except Exception:  # noqa: BLE001 -- not installed, or broken: the Triton kernels are unavailable
        return frozenset()
    return frozenset(backends)


def _torch_device_available(device_type: str) -> bool:
    import torch

    module = getattr(torch, device_type, None)
    try:
        return bool(module is not None and module.is_available())
    except Exception:  # noqa: BLE001 -- a driver error means the device is unusable
        return False


def triton_device_available(device_type: str) -> bool:
    """Whether Anna's Triton kernels can run on ``device_type`` in this process."""
    if device_type == "cuda":
        return _torch_device_available("cuda") and bool(_triton_backends() & {"nvidia", "amd"})
    if device_type == "xpu":
        return _torch_device_available("xpu") and "intel" in _triton_backends()
    if device_type == "cpu":
        return cpu_interpret_requested() and bool(_triton_backends())
    return False


@functools.cache
def fla_available() -> bool:
    """Whether fla-core's gated delta rule imports (it pulls in triton)."""
    try:
        importlib.import_module("fla.ops.gated_delta_rule")
    except Exception:  # noqa: BLE001 -- missing, hidden (sys.modules["fla"] = None) or broken
        return False
    return True


def _shape_within(shape: dict[str, Any], limits: dict[str, int]) -> bool:
    for key, limit in limits.items():
        value = shape.get(key)
        if value is not None and not (0 < int(value) <= limit):
            return False
    return True


def _triton_ok(request: Any) -> bool:
    return request.dtype in TRITON_DTYPES and triton_device_available(request.device_type)


def norm_probe(request: Any) -> bool:
    """rms_norm / gated_rms_norm / add_rms_norm, and the elementwise silu_and_mul / sigmoid_mul: any
    Triton device, float dtypes, ``dim`` up to 16384 (the elementwise ops take any size)."""
    return _shape_within(request.shape, {"dim": MAX_NORM_DIM, "hidden_size": MAX_NORM_DIM}) and _triton_ok(request)


def conv1d_probe(request: Any) -> bool:
    """causal_conv1d_prefill / causal_conv1d_update: any Triton device, float dtypes."""
    return _triton_ok(request)


def gated_delta_rule_decode_probe(request: Any) -> bool:
    """gated_delta_rule_decode: any Triton device, float dtypes, head dims up to 256."""
    limits = {"head_dim": MAX_HEAD_DIM, "head_k_dim": MAX_HEAD_DIM, "head_v_dim": MAX_HEAD_DIM}
    return _shape_within(request.shape, limits) and _triton_ok(request)


def paged_attention_probe(request: Any) -> bool:
    """paged_attention: any Triton device, float dtypes, ``head_dim`` up to 256."""
    return _shape_within(request.shape, {"head_dim": MAX_HEAD_DIM}) and _triton_ok(request)


def linear_probe(request: Any) -> bool:
    """linear: any Triton device, float dtypes (rows beyond the GEMV's 8 go to ``F.linear`` inside)."""
    return _triton_ok(request)


def fla_prefill_probe(request: Any) -> bool:
    """gated_delta_rule_prefill via fla: CUDA only, float16 / bfloat16, head dims up to 256, fla importable."""
    limits = {"head_dim": MAX_HEAD_DIM, "head_k_dim": MAX_HEAD_DIM, "head_v_dim": MAX_HEAD_DIM}
    return (request.device_type == "cuda" and request.dtype in FLA_DTYPES and _shape_within(request.shape, limits)
            and triton_device_available("cuda") and fla_available())
