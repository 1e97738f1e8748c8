"""Where a decode step's time goes: device time per model component.

Forward hooks wrap each component module in a profiler range (``anna::gdn``, ``anna::attention``,
``anna::mlp``, ``anna::norms``, ``anna::embed``), the runner wraps the LM head and the sampler
(``anna::lm_head``, ``anna::sampling``). Decode steps run eagerly under ``torch.profiler``; each
range is charged the summed duration of the device kernels launched inside it (CPU time on the
CPU). Kernel time excludes launch gaps, so the sum approximates a captured graph's replay time;
``other`` is kernel time outside every range.
"""

from __future__ import annotations

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


def _attach(model: nn.Module) -> Callable[[], None]:
    handles = []
    for comp, module in component_modules(model):
        stack: list[Any] = []

        def pre(_m, _a, comp=comp, stack=stack):
            rf = torch.profiler.record_function(f"anna::{comp}")
            rf.__enter__()
            stack.append(rf)

        def post(_m, _a, _o, stack=stack):
            stack.pop().__exit__(None, None, None)

        handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]
    return lambda: [h.remove() for h in handles]


def _kernel_us(evt) -> float:
    own = sum(k.duration for k in getattr(evt, "kernels", []) or [])
    return own + sum(_kernel_us(c) for c in evt.cpu_children)


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
    detach = _attach(runner.model)
    runner.profile_scopes = True
    try:
        with profile(activities=activities) as prof:
            steps = run_steps()
    finally:
        runner.profile_scopes = False
        detach()
        runner.graphs = graphs
    per = defaultdict(float)
    events = prof.events()
    for evt in events:
        if evt.name.startswith("anna::") and evt.device_type == DeviceType.CPU:
            comp = evt.name.split("::", 1)[1]
            per[comp] += _kernel_us(evt) if on_device else evt.cpu_time_total
    if on_device:
        total = sum(sum(k.duration for k in (getattr(e, "kernels", []) or [])) for e in events)
    else:
        total = sum(e.cpu_time_total for e in events if e.cpu_parent is None)
    steps = max(1, steps)
    out = {c: per.get(c, 0.0) / steps / 1e3 for c in COMPONENTS if c != "other"}
    out["total"] = total / steps / 1e3
    out["other"] = max(0.0, out["total"] - sum(out[c] for c in COMPONENTS if c != "other"))
    return out
