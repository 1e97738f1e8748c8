"""Where a decode step's time goes: device time per model component.

Forward hooks wrap each component module in a profiler range (``anna::gdn``, ``anna::attention``,
``anna::mlp``, ``anna::norms``, ``anna::embed``), the runner wraps the LM head and the sampler
(``anna::lm_head``, ``anna::sampling``). Decode steps run eagerly under ``torch.profiler``.

On an accelerator every range boundary synchronizes the device, so each device kernel runs
entirely inside the host time range of the component that launched it; a kernel is charged to the
range that contains its midpoint. (The profiler links a kernel to its launching *aten* op only:
kernels launched directly by Triton or other extensions have no such link, so attribution by
time window is what counts them.) Kernel durations exclude launch gaps and the idle time the
synchronization adds, so the sum approximates a captured graph's replay time; ``other`` is kernel
time outside every range. On the CPU each range is charged its CPU time.

``norms`` counts only norms called as modules outside a token mixer / MLP: in Qwen3.5 the per-layer
pre-norms are fused into the projection that follows them (``add_rms_norm_linear``,
``add_rms_norm_linear_act_mul``; where a kernel plugin runs them as separate launches, still inside
the mixer's / MLP's call), so their time is part of ``gdn`` / ``attention`` / ``mlp`` and ``norms``
is the final norm alone.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

COMPONENT_CLASSES = {
    "GatedDeltaNet": "gdn",
    "GatedAttention": "attention",
    "SwiGLUMLP": "mlp",
    "Embedding": "embed",
}
"""Module class name -> component (top-level norms are found by position, see :func:`component_modules`)."""

COMPONENTS = ("gdn", "attention", "mlp", "norms", "lm_head", "sampling", "embed", "other")


def component_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """``(component, module)`` for every module to time; norms count only outside a token mixer."""
    from anna_core.layers.norm import RMSNorm

    found = []
    inside: list[str] = []
    for name, module in model.named_modules():
        if any(name.startswith(p + ".") for p in inside):
            continue
        comp = COMPONENT_CLASSES.get(type(module).__name__)
        if comp is None and isinstance(module, RMSNorm):
            comp = "norms"
        if comp is not None:
            found.append((comp, module))
            inside.append(name)
    return found


def _attach(model: nn.Module, sync: Callable[[], None] | None = None) -> Callable[[], None]:
    """Wrap each component in an ``anna::<component>`` profiler range (``sync()`` at both ends)."""
    handles = []
    for comp, module in component_modules(model):
        stack: list[Any] = []

        def pre(_m, _a, comp=comp, stack=stack):
            if sync is not None:
                sync()
            rf = torch.profiler.record_function(f"anna::{comp}")
            rf.__enter__()
            stack.append(rf)

        def post(_m, _a, _o, stack=stack):
            if sync is not None:
                sync()
            stack.pop().__exit__(None, None, None)

        handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]
    return lambda: [h.remove() for h in handles]


DEVICE_WORK = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
"""Kineto activity types that are device work (the device timeline also carries the profiler ranges
themselves, ``gpu_user_annotation``, and synchronization waits, ``cuda_sync``)."""


def is_device_work(event: Any) -> bool:
    """Whether a device-side profiler event is a kernel, copy or memset (not a range or a wait)."""
    kind = getattr(event, "activity_type", None)
    if kind:
        return kind in DEVICE_WORK
    return not event.name.startswith("anna::")


def attribute_device_time(ranges: list[tuple[str, float, float]],
                          kernels: list[tuple[float, float]]) -> dict[str, float]:
    """Charge each device kernel ``(start, end)`` to the innermost named host range ``(name, start,
    end)`` containing its midpoint (``"other"`` when none does); returns summed durations per name
    (same unit as the inputs). Ranges may nest (e.g. a norm called inside a mixer); a kernel inside
    the inner range is charged to it, one outside it to the enclosing range."""
    ordered = sorted(ranges, key=lambda r: r[1])
    starts = [r[1] for r in ordered]
    per: dict[str, float] = defaultdict(float)
    for start, end in kernels:
        mid = (start + end) / 2
        name = "other"
        for i in range(bisect.bisect_right(starts, mid) - 1, -1, -1):  # latest start first: innermost
            if ordered[i][2] >= mid:
                name = ordered[i][0]
                break
        per[name] += end - start
    return dict(per)


def profile_steps(runner: Any, run_steps: Callable[[], int]) -> dict[str, float]:
    """Profile the decode steps that ``run_steps()`` executes (it returns how many it ran).

    The runner's graphs are switched off for the duration (components are invisible inside a graph).

    Returns:
        ``{component: ms per step}`` for :data:`COMPONENTS`, plus ``"total"``.
    """
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    on_device = runner.device.type != "cpu"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if runner.device.type == "cuda" else [])
    if runner.device.type == "xpu":
        activities.append(ProfilerActivity.XPU)
    graphs, runner.graphs = runner.graphs, None
    detach = _attach(runner.model, runner.accel.synchronize if on_device else None)
    runner.profile_scopes = True
    try:
        with profile(activities=activities) as prof:
            steps = run_steps()
    finally:
        runner.profile_scopes = False
        detach()
        runner.graphs = graphs
    events = prof.events()
    steps = max(1, steps)
    ranges = [(e.name.split("::", 1)[1], e.time_range.start, e.time_range.end) for e in events
              if e.name.startswith("anna::") and e.device_type == DeviceType.CPU]
    if on_device:
        kernels = [(e.time_range.start, e.time_range.end) for e in events
                   if e.device_type in (DeviceType.CUDA, DeviceType.XPU) and is_device_work(e)]
        per = attribute_device_time(ranges, kernels)
        total = sum(end - start for start, end in kernels)
    else:
        per = defaultdict(float)
        for e in events:
            if e.name.startswith("anna::") and e.device_type == DeviceType.CPU:
                per[e.name.split("::", 1)[1]] += e.cpu_time_total
        total = sum(e.cpu_time_total for e in events if e.cpu_parent is None)
    out = {c: per.get(c, 0.0) / steps / 1e3 for c in COMPONENTS if c != "other"}
    out["total"] = total / steps / 1e3
    out["other"] = max(0.0, out["total"] - sum(out[c] for c in COMPONENTS if c != "other"))
    return out
