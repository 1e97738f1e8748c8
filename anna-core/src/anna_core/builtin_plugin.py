"""Anna-core's own plugin: its op contracts (and so their torch references) and the ``generate`` task,
registered like any other plugin's."""

from anna_core.hookspecs import hookimpl
from anna_core.kernels.ops import CORE_OPS
from anna_core.registry import TaskSpec

GENERATE_TASK = TaskSpec(
    name="generate",
    engine="anna_core.tasks.generate:build",
    serving="anna_core.tasks.generate:start",
    routes="anna_core.server.routes_generate:ROUTES",
    description="text out: OpenAI chat and text completions, /tokenize, /detokenize",
    distribution="anna-core",
)


@hookimpl
def register_ops(register):
    for contract in CORE_OPS:
        register(contract)


@hookimpl
def register_tasks(register):
    register(GENERATE_TASK)
