"""Hook specifications of the ``anna`` plugin seam.

Every hook here is a *registration* hook: it receives a ``register`` callback (or the click
group, for commands) and calls it once per thing it contributes. Entry modules that implement
these hooks must stay cheap to import: they hand over plain objects holding lazy
``"module:attr"`` strings, never import torch kernels, touch a device or read weights.

Documented hooks are checked by ``tests/core/test_docs.py``: a new hook spec without a section
in ``docs/plugins.md`` fails the test suite.
"""

from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("anna")
hookimpl = pluggy.HookimplMarker("anna")


@hookspec
def register_model_families(register):
    """Register model families.

    Call ``register(anna_core.registry.ModelFamilySpec(...))`` once per family. A family names
    the ``model_type`` values, ``architectures`` and GGUF ``general.architecture`` values it
    serves and a lazy ``"module:attr"`` loader.
    """


@hookspec
def register_ops(register):
    """Register kernel op contracts.

    Call ``register(anna_core.kernels.OpContract(...))`` once per op the plugin defines: its name,
    documented signature, lazy ``"module:attr"`` torch reference (the op's ``"reference"``
    implementation, priority 0) and optionally its argument check and probe shape facts. An op has
    exactly one contract; anna-core registers its own ops (``anna_core.kernels.ops``) this way.
    """


@hookspec
def register_kernels(register):
    """Register kernel implementations.

    Call ``register(anna_core.kernels.KernelSpec(...))`` once per (op, implementation) of an op
    whose contract some plugin registers (``register_ops``). Each carries an explicit integer
    priority and a lazy availability probe (and may declare the device types it runs on at all,
    ``devices``); the highest-priority implementation whose probe accepts a (device, dtype, shape) wins,
    and the op's torch reference serves what every probe declines.
    """


@hookspec
def register_output_parsers(register):
    """Register reasoning and tool-call output parsers.

    Call ``register(anna_core.registry.OutputParserSpec(...))`` once per parser.
    """


@hookspec
def register_routes(register):
    """Register extra HTTP route handlers.

    Call ``register(anna_core.registry.RouteSpec(...))`` with a lazy ``"module:attr"`` that
    resolves to a litestar route handler (or a list of them).
    """


@hookspec
def register_tasks(register):
    """Register tasks (what a family's models do: ``generate``, ``transcribe``, ``speech``).

    Call ``register(anna_core.registry.TaskSpec(...))`` once per task: its name (unique across
    plugins), a lazy ``"module:attr"`` engine builder, a lazy starter wrapping that engine for the
    server, and lazy route handlers. Families name their tasks in ``ModelFamilySpec.tasks``;
    ``anna serve`` builds and serves the loaded family's task through this hook. anna-core registers
    ``generate`` (text out, the OpenAI routes) this way.
    """


@hookspec
def register_commands(cli):
    """Add click commands to the ``anna`` command group ``cli``."""


@hookspec
def register_default_models(register):
    """Offer a model to serve when no ``--model-dir`` is given.

    Call ``register(anna_core.registry.DefaultModelSpec(...))`` with a lazy path resolver, a
    display name and a priority. The highest-priority installed default wins.
    """
