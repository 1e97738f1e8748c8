"""Anna-core's own plugin: its op contracts (and so their torch references), registered like any other
plugin's ops."""

from anna_core.hookspecs import hookimpl
from anna_core.kernels.ops import CORE_OPS


@hookimpl
def register_ops(register):
    for contract in CORE_OPS:
        register(contract)
