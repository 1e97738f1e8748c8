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
    ``head_dim``: at most 256 (GDN), 512 (``paged_attention``, ``paged_attention_turboquant``); ``head_k_dim`` /
    ``head_v_dim`` (GDN): at most 256;
    ``dim`` / ``hidden_size`` (norms): at most 16384; ``num_experts`` (``moe_route``): at most
    :data:`MAX_ROUTE_EXPERTS` (beyond, that kernel raises rather than falls back: callers pass the
    fact). The fused gated DeltaNet decode step (``fused_gdn_decode``) requires ``head_k_dim`` and
    ``head_v_dim`` (it fuses heads of at most 256 only, :func:`anna_xpu_kernels.gdn_decode_fused.fusable`),
    the fused attention pre-processing (``qk_norm_rope_cache``, ``qkv_norm_rope_cache``, ``q_norm_rope``,
    ``q_norm_rope_attention``, ``qk_norm_rope_cache_attention``, ``qkv_norm_rope_cache_attention``) ``head_dim``:
    without them they decline.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

from anna_xpu_kernels._env import (
    cpu_interpret_requested,
    fused_snake_requested,
    post_norm_gated_linear_requested,
    q_norm_rope_attention_head_dims,
    qk_norm_rope_attention_head_dims,
    qkv_norm_rope_attention_head_dims,
    qkv_norm_rope_requested,
)

TRITON_DTYPES = ("float32", "float16", "bfloat16")
FLA_DTYPES = ("float16", "bfloat16")
MAX_HEAD_DIM = 256
MAX_ATTENTION_HEAD_DIM = 512  # paged_attention tiles wide heads (Gemma 4's global layers: 512)
MAX_NORM_DIM = 16384
MAX_ROUTE_EXPERTS = 1024
"""Most experts ``moe_route``'s Triton kernel holds in registers (one row of logits per program row)."""


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


FLA_FORWARD_PARAMS = ("q", "k", "v", "g", "beta", "scale", "initial_state", "output_final_state", "cu_seqlens",
                      "chunk_indices", "chunk_size")
"""Parameters of fla's ``chunk_gated_delta_rule_fwd`` that :mod:`anna_xpu_kernels.fla_prefill` passes
(the first eight positionally, in this order; fla-core 0.6.0)."""


def fla_api_ok(chunk_module: Any, index_module: Any) -> bool:
    """Whether fla's ``chunk`` module has ``chunk_gated_delta_rule_fwd`` with :data:`FLA_FORWARD_PARAMS`
    (positional ones in order) and its index module ``prepare_chunk_indices``: the private API Anna calls."""
    import inspect

    fwd = getattr(chunk_module, "chunk_gated_delta_rule_fwd", None)
    if fwd is None or not callable(getattr(index_module, "prepare_chunk_indices", None)):
        return False
    try:
        params = list(inspect.signature(fwd).parameters)
    except (TypeError, ValueError):
        return False
    return params[:8] == list(FLA_FORWARD_PARAMS[:8]) and all(p in params for p in FLA_FORWARD_PARAMS[8:])


FLA_DISPATCH_SWITCH = "FLA_DISABLE_BACKEND_DISPATCH"
"""fla-core's switch (read once, when fla is imported) that binds each of its ops to its Triton
implementation instead of routing every call through its backend registry."""


@functools.cache
def fla_available() -> bool:
    """Whether fla-core's chunked gated delta rule imports (it pulls in triton) and has the forward
    function Anna calls (:func:`fla_api_ok`; another fla version declines instead of failing mid-prefill).

    Before the first import of fla this sets ``FLA_DISABLE_BACKEND_DISPATCH=1`` unless the environment
    already sets it: fla then calls its Triton kernels directly instead of asking its backend registry
    for each of the ~5 kernel wrappers per gated DeltaNet layer (which measurably shortens an eager
    prefill's host time: BENCHMARKS.md, eighth session). The Triton kernels are what fla runs anyway when
    no alternative backend is installed, and what the GPU benchmark checks against the reference. Set
    it to ``0`` to keep fla's dispatch. Anna's kernels import fla only after this probe; when something
    imported fla earlier (e.g. transformers' Qwen3.5 model class) the switch cannot take effect, and a
    warning says so. In ``anna bench --compare-hf`` HF's fla calls run without the dispatch too."""
    import logging
    import os
    import sys

    if "fla" not in sys.modules:
        os.environ.setdefault(FLA_DISPATCH_SWITCH, "1")
    elif FLA_DISPATCH_SWITCH not in os.environ:
        logging.getLogger("anna.kernels").warning(
            "fla was imported before Anna's kernels: its backend dispatch stays on (set %s=1 before importing fla "
            "to skip it; prefill host time)", FLA_DISPATCH_SWITCH)
    try:
        chunk = importlib.import_module("fla.ops.gated_delta_rule.chunk")
        index = importlib.import_module("fla.ops.utils.index")
    except Exception:  # noqa: BLE001 -- missing, hidden (sys.modules["fla"] = None) or broken
        return False
    return fla_api_ok(chunk, index)


def _shape_within(shape: dict[str, Any], limits: dict[str, int]) -> bool:
    for key, limit in limits.items():
        value = shape.get(key)
        if value is not None and not (0 < int(value) <= limit):
            return False
    return True


def _triton_ok(request: Any) -> bool:
    return request.dtype in TRITON_DTYPES and triton_device_available(request.device_type)


def norm_probe(request: Any) -> bool:
    """rms_norm / gated_rms_norm / add_rms_norm / post_norm_residual / dual_post_norm_residual / rms_norm_pair /
    post_norm_residual_norm_pair / per_layer_inputs, and the elementwise silu_and_mul / sigmoid_mul: any Triton device, float dtypes, ``dim`` up to 16384 (the elementwise ops take any size)."""
    return _shape_within(request.shape, {"dim": MAX_NORM_DIM, "hidden_size": MAX_NORM_DIM}) and _triton_ok(request)


def snake_beta_probe(request: Any) -> bool:
    """snake_beta: any Triton device, float dtypes, when ``ANNA_FUSED_SNAKE=1`` asks for it
    (:func:`anna_xpu_kernels._env.fused_snake_requested`; opt-in until a GPU measures it)."""
    return fused_snake_requested() and _triton_ok(request)


def conv1d_probe(request: Any) -> bool:
    """causal_conv1d_prefill / causal_conv1d_update: any Triton device, float dtypes."""
    return _triton_ok(request)


def gated_delta_rule_decode_probe(request: Any) -> bool:
    """gated_delta_rule_decode: any Triton device, float dtypes, head dims up to 256."""
    limits = {"head_dim": MAX_HEAD_DIM, "head_k_dim": MAX_HEAD_DIM, "head_v_dim": MAX_HEAD_DIM}
    return _shape_within(request.shape, limits) and _triton_ok(request)


def _shape_given(shape: dict[str, Any], keys: tuple[str, ...]) -> bool:
    return all(shape.get(key) is not None for key in keys)


def fused_gdn_decode_probe(request: Any) -> bool:
    """fused_gdn_decode: any Triton device, float dtypes, ``head_k_dim`` and ``head_v_dim`` given and at
    most 256 (the heads :func:`anna_xpu_kernels.gdn_decode_fused.fusable` accepts)."""
    keys = ("head_k_dim", "head_v_dim")
    return (_shape_given(request.shape, keys) and _shape_within(request.shape, dict.fromkeys(keys, MAX_HEAD_DIM))
            and _triton_ok(request))


def qk_norm_rope_probe(request: Any) -> bool:
    """qk_norm_rope_cache and q_norm_rope: any Triton device, float dtypes, ``head_dim`` given and at most 16384 (one head
    row per program, as the norms)."""
    return (_shape_given(request.shape, ("head_dim",)) and _shape_within(request.shape, {"head_dim": MAX_NORM_DIM})
            and _triton_ok(request))


def qkv_norm_rope_probe(request: Any) -> bool:
    """qkv_norm_rope_cache: as :func:`qk_norm_rope_probe`, unless ``ANNA_QKV_NORM_ROPE=0`` (then it declines and the
    caller runs the value norm apart, for A/B measurements)."""
    return qkv_norm_rope_requested() and qk_norm_rope_probe(request)


def q_norm_rope_attention_probe(request: Any) -> bool:
    """q_norm_rope_attention: any Triton device, float dtypes, ``head_dim`` given and at most 512 (the attention
    kernel's) or what ``ANNA_Q_NORM_ROPE_ATTENTION`` says (``0``: it declines, ``q_norm_rope`` and the attention run
    apart; ``256``: heads up to 256 only)."""
    limit = q_norm_rope_attention_head_dims(MAX_ATTENTION_HEAD_DIM)
    return (_shape_given(request.shape, ("head_dim",)) and 0 < request.shape["head_dim"] <= limit
            and _triton_ok(request))


def qkv_norm_rope_attention_probe(request: Any) -> bool:
    """qkv_norm_rope_cache_attention: as :func:`q_norm_rope_attention_probe`, its limit set by
    ``ANNA_QKV_NORM_ROPE_ATTENTION`` (``0``: it declines, ``qkv_norm_rope_cache`` and the attention run apart)."""
    limit = qkv_norm_rope_attention_head_dims(MAX_ATTENTION_HEAD_DIM)
    return (_shape_given(request.shape, ("head_dim",)) and 0 < request.shape["head_dim"] <= limit
            and _triton_ok(request))


def qk_norm_rope_attention_probe(request: Any) -> bool:
    """qk_norm_rope_cache_attention: as :func:`q_norm_rope_attention_probe`, its limit set by
    ``ANNA_QK_NORM_ROPE_ATTENTION`` (unset or ``0``: it declines, ``qk_norm_rope_cache`` and the attention run
    apart)."""
    limit = qk_norm_rope_attention_head_dims(MAX_ATTENTION_HEAD_DIM)
    return (_shape_given(request.shape, ("head_dim",)) and 0 < request.shape["head_dim"] <= limit
            and _triton_ok(request))


def paged_attention_probe(request: Any) -> bool:
    """paged_attention: any Triton device, float dtypes, ``head_dim`` up to 512."""
    return _shape_within(request.shape, {"head_dim": MAX_ATTENTION_HEAD_DIM}) and _triton_ok(request)


def turboquant_write_probe(request: Any) -> bool:
    """turboquant_cache_write: any Triton device, float dtypes (the rows are processed in column chunks; callers pass
    no shape facts)."""
    return _triton_ok(request)


def linear_probe(request: Any) -> bool:
    """linear: any Triton device, float dtypes (rows beyond the GEMV's 16, or ``ANNA_GEMV_MAX_ROWS``, go to
    ``F.linear`` inside)."""
    return _triton_ok(request)


def gated_block_probe(request: Any) -> bool:
    """post_norm_residual_gated_linear: any Triton device, float dtypes, opt-in until measured on a GPU
    (``ANNA_POST_NORM_GATED_LINEAR=1``; unset or ``0``: it declines, Gemma 4 runs ``post_norm_residual_linear`` and
    ``gated_linear``)."""
    return post_norm_gated_linear_requested() and _triton_ok(request)


def wq_linear_probe(request: Any) -> bool:
    """wq_linear, add_rms_norm_wq_linear, moe_experts_wq: any Triton device, float dtypes, schemes int4 / int8 on any of them and
    fp8 on CUDA (Triton converts e4m3 on compute capability 8.9+; the loader refuses fp8 elsewhere) or under the
    interpreter."""
    scheme = request.shape.get("scheme")
    if scheme not in (None, "int4", "int8", "fp8"):
        return False
    return _triton_ok(request) and (scheme != "fp8" or request.device_type in ("cuda", "cpu"))


def lm_head_topk_probe(request: Any) -> bool:
    """lm_head_topk: any Triton device, float dtypes; a dense head (``scheme`` ``"none"`` or not given) anywhere,
    the quantized schemes where ``wq_linear``'s kernel takes them."""
    scheme = request.shape.get("scheme")
    if scheme in (None, "none"):
        return _triton_ok(request)
    return wq_linear_probe(request)


def moe_experts_probe(request: Any) -> bool:
    """moe_experts: any Triton device, float dtypes (the grouped GEMMs tile every dimension; no shape facts)."""
    return _triton_ok(request)


def moe_route_probe(request: Any) -> bool:
    """moe_route: any Triton device, float dtypes, ``num_experts`` (when given) at most :data:`MAX_ROUTE_EXPERTS`
    (wider routers keep the torch reference)."""
    return _shape_within(request.shape, {"num_experts": MAX_ROUTE_EXPERTS}) and _triton_ok(request)


def sampling_probe(request: Any) -> bool:
    """top_k_gumbel_sample: any Triton device, float dtypes of the logits (a wide vocabulary or ``top_k`` runs the
    torch reference inside the implementation: no shape facts)."""
    return _triton_ok(request)


def fla_prefill_probe(request: Any) -> bool:
    """gated_delta_rule_prefill and fused_gdn_prefill via fla: CUDA only, float16 / bfloat16, head dims up to 256, fla importable."""
    limits = {"head_dim": MAX_HEAD_DIM, "head_k_dim": MAX_HEAD_DIM, "head_v_dim": MAX_HEAD_DIM}
    return (request.device_type == "cuda" and request.dtype in FLA_DTYPES and _shape_within(request.shape, limits)
            and triton_device_available("cuda") and fla_available())
