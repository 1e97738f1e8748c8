"""Anna-core's own plugin: the torch reference kernels, registered like any other kernel plugin."""

from anna_core.hookspecs import hookimpl
from anna_core.kernels.ops import OPS
from anna_core.kernels.registry import REFERENCE_PRIORITY, KernelSpec


@hookimpl
def register_kernels(register):
    for op, impl in OPS.items():
        register(KernelSpec(op=op, name="reference", impl=impl, priority=REFERENCE_PRIORITY))
