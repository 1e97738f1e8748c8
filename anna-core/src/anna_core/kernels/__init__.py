"""Kernel ops, their registration records and priority/probe-based selection.

Every op is declared by one :class:`OpContract` (name, documented signature, pure-torch reference,
optional argument check), registered through the ``register_ops`` hook: anna-core's own ops
(:mod:`anna_core.kernels.ops`) by the built-in plugin, others by any plugin. Each contract's reference
is the op's implementation of last resort (priority 0). Plugins (e.g. ``anna-xpu-kernels``) register
faster implementations (:class:`KernelSpec`, ``register_kernels``) with a higher priority and a
probe that accepts or declines a ``(device, dtype, shape)``.
"""

from anna_core.kernels.contracts import OpContract, OpExample
from anna_core.kernels.registry import KernelRegistry, KernelSpec, OpTable, ProbeRequest, bind_ops

__all__ = ["KernelRegistry", "KernelSpec", "OpContract", "OpExample", "OpTable", "ProbeRequest", "bind_ops"]
