"""Kernel ops, their registration records and priority/probe-based selection.

Every op has one documented signature (see :mod:`anna_core.kernels.ops`) and a pure-torch
reference implementation in :mod:`anna_core.kernels.reference` registered at the lowest priority
by the built-in plugin. Plugins (e.g. ``anna-xpu-kernels``) register faster implementations with a
higher priority and a probe that accepts or declines a ``(device, dtype, shape)``.
"""

from anna_core.kernels.registry import KernelRegistry, KernelSpec, OpTable, ProbeRequest, bind_ops

__all__ = ["KernelRegistry", "KernelSpec", "OpTable", "ProbeRequest", "bind_ops"]
