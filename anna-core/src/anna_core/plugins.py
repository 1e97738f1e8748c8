"""The ``anna`` plugin manager: loads the ``anna`` entry-point group once per process.

``ANNA_LOAD_PLUGINS`` (a comma-separated list of entry-point names, e.g.
``anna_qwen35,anna_xpu_kernels``) restricts which plugins load; unset loads all of them, an
empty string loads none. The built-in plugin (``anna_core_reference``: anna-core's op contracts and
their torch references) is part of anna-core, not an optional plugin: it is always registered,
whatever the allow-list says, so every core op has an implementation. An allow-list name that matches no installed plugin is
logged as a warning.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import os
from typing import Any

import pluggy

from anna_core import hookspecs
from anna_core.errors import AnnaError, UnsupportedModelError
from anna_core.registry import (
    KNOWN_TASK_DISTRIBUTIONS,
    DefaultModelSpec,
    ModelFamilySpec,
    OutputParserSpec,
    RouteSpec,
    TaskSpec,
)

ENTRY_POINT_GROUP = "anna"
ALLOW_LIST_ENV = "ANNA_LOAD_PLUGINS"
BUILTIN_PLUGIN = "anna_core_reference"

log = logging.getLogger("anna.plugins")


def plugin_allow_list() -> set[str] | None:
    """The entry-point names ``ANNA_LOAD_PLUGINS`` allows (``None`` when unset: all of them)."""
    raw = os.environ.get(ALLOW_LIST_ENV)
    if raw is None:
        return None
    return {name.strip() for name in raw.split(",") if name.strip()}


def _log_hook_call(hook_name: str, hook_impls: list[Any], kwargs: dict[str, Any]) -> None:
    if log.isEnabledFor(logging.DEBUG):
        log.debug("hook %s called on %s", hook_name, ", ".join(impl.plugin_name for impl in reversed(hook_impls))
                  or "no plugin")


def _log_hook_result(outcome: Any, hook_name: str, hook_impls: list[Any], kwargs: dict[str, Any]) -> None:
    if outcome.exception is not None and log.isEnabledFor(logging.DEBUG):
        log.debug("hook %s raised %s: %s", hook_name, type(outcome.exception).__name__, outcome.exception)


def make_plugin_manager(allow: set[str] | None = None, *, load_entry_points: bool = True) -> pluggy.PluginManager:
    """Build a fresh plugin manager and load the ``anna`` entry points into it.

    Args:
        allow: entry-point names to load (``None`` loads all).
        load_entry_points: ``False`` gives an empty manager (tests register plugins by hand).
    """
    pm = pluggy.PluginManager("anna")
    pm.add_hookspecs(hookspecs)
    pm.add_hookcall_monitoring(_log_hook_call, _log_hook_result)
    dists: dict[str, Any] = {}
    pm.anna_distributions = dists  # type: ignore[attr-defined]  # entry-point name -> Distribution
    if load_entry_points:
        entry_points = list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
        if allow is not None:
            unknown = sorted(allow - {ep.name for ep in entry_points})
            if unknown:
                log.warning("%s names plugins that are not installed: %s (installed: %s)", ALLOW_LIST_ENV,
                            unknown, sorted(ep.name for ep in entry_points))
        for ep in entry_points:
            if allow is not None and ep.name not in allow and ep.name != BUILTIN_PLUGIN:
                continue
            if pm.get_plugin(ep.name) is not None or pm.is_blocked(ep.name):
                continue
            pm.register(ep.load(), name=ep.name)
            dists[ep.name] = ep.dist
    return pm


@functools.lru_cache(maxsize=1)
def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager (entry points loaded once, honouring ``ANNA_LOAD_PLUGINS``)."""
    return make_plugin_manager(plugin_allow_list())


def _collect(pm: pluggy.PluginManager, hook_name: str) -> list[Any]:
    items: list[Any] = []
    getattr(pm.hook, hook_name)(register=items.append)
    return items


def model_families(pm: pluggy.PluginManager | None = None) -> list[ModelFamilySpec]:
    return _collect(pm or get_plugin_manager(), "register_model_families")


def output_parsers(pm: pluggy.PluginManager | None = None) -> list[OutputParserSpec]:
    return _collect(pm or get_plugin_manager(), "register_output_parsers")


def routes(pm: pluggy.PluginManager | None = None) -> list[RouteSpec]:
    return _collect(pm or get_plugin_manager(), "register_routes")


def default_models(pm: pluggy.PluginManager | None = None) -> list[DefaultModelSpec]:
    return _collect(pm or get_plugin_manager(), "register_default_models")


def tasks(pm: pluggy.PluginManager | None = None) -> list[TaskSpec]:
    """Every task the plugins register (``register_tasks``), anna-core's ``generate`` included.

    Raises:
        AnnaError: two plugins register one task name.
    """
    found = _collect(pm or get_plugin_manager(), "register_tasks")
    by_name: dict[str, TaskSpec] = {}
    for spec in found:
        if spec.name in by_name:
            both = sorted(s.distribution or "a plugin" for s in (by_name[spec.name], spec))
            raise AnnaError(f"two plugins register the task {spec.name!r} ({both[0]} and {both[1]}); "
                            f"uninstall one or restrict {ALLOW_LIST_ENV}")
        by_name[spec.name] = spec
    return found


def task_for(family: ModelFamilySpec, pm: pluggy.PluginManager | None = None, name: str | None = None) -> TaskSpec:
    """The task ``family`` runs: ``name`` (one of ``family.tasks``) or, by default, its main task.

    Raises:
        UnsupportedModelError: ``name`` is not one of the family's tasks, or no installed plugin
            registers the task (the message names the task and what to install, when known).
        AnnaError: two plugins register the task's name.
    """
    name = family.tasks[0] if name is None else name
    if name not in family.tasks:
        raise UnsupportedModelError(f"the {family.name!r} family serves the task(s) {', '.join(family.tasks)}, "
                                    f"not {name!r}")
    registered = {spec.name: spec for spec in tasks(pm)}
    if name not in registered:
        hint = KNOWN_TASK_DISTRIBUTIONS.get(name) or family.distribution
        raise UnsupportedModelError(
            f"the {family.name!r} family needs the task {name!r}, which no installed plugin registers "
            f"(installed tasks: {', '.join(sorted(registered)) or 'none'})"
            + (f"; install {hint}" if hint else ""))
    return registered[name]


def check_task(task: TaskSpec) -> None:
    """Import ``task``'s ``engine``, ``serving`` and ``routes`` targets now, so a broken plugin fails before a
    server binds its socket or loads weights.

    Raises:
        AnnaError: a target does not import (the message names the task, the target and why).
    """
    from anna_core.errors import AnnaError
    from anna_core.registry import resolve

    for field in ("engine", "serving", "routes"):
        target = getattr(task, field)
        try:
            resolve(target)
        except (ImportError, AttributeError, ValueError) as exc:
            raise AnnaError(f"the {task.name!r} task's {field} {target!r} (from {task.distribution or 'a plugin'}) "
                            f"does not import: {type(exc).__name__}: {exc}") from exc


def kernel_specs(pm: pluggy.PluginManager | None = None) -> list[Any]:
    return _collect(pm or get_plugin_manager(), "register_kernels")


def op_contracts(pm: pluggy.PluginManager | None = None) -> list[Any]:
    """Every ``OpContract`` the plugins register (``register_ops``), anna-core's own included."""
    return _collect(pm or get_plugin_manager(), "register_ops")


def _own(pm: pluggy.PluginManager, plugin: Any, hook_name: str) -> list[Any]:
    """What ``plugin`` alone registers through the registration hook ``hook_name``."""
    items: list[Any] = []
    others = [p for p in pm.get_plugins() if p is not plugin]
    pm.subset_hook_caller(hook_name, remove_plugins=others)(register=items.append)
    return items


def describe_plugins(pm: pluggy.PluginManager | None = None) -> list[dict[str, Any]]:
    """One JSON-ready record per loaded plugin (what ``anna plugins`` prints), sorted by name:

    * ``name``, ``distribution``, ``version``, ``hooks`` (the hook specs it implements);
    * ``families``: each model family it registers, with its ``model_types``, ``architectures``,
      ``gguf_architectures`` and ``tasks``;
    * ``tasks``: the task names it registers;
    * ``ops``: the op contracts it registers (names);
    * ``kernels``: its kernel implementations, ``{"op", "name", "priority", "devices"}``, highest priority
      first; the plugin that registers an op also lists its torch reference (``"reference"``, priority 0).
      ``devices`` is the declared device types (``KernelSpec.devices``), ``null`` for any device (the probe
      decides).

    Nothing is imported beyond the entry modules: the records hold what the plugins registered.
    """
    from anna_core.kernels.contracts import REFERENCE_NAME

    pm = pm or get_plugin_manager()
    dists = getattr(pm, "anna_distributions", {})
    out = []
    for name, plugin in sorted(pm.list_name_plugin(), key=lambda item: item[0]):
        dist = dists.get(name)
        hooks = sorted(caller.name for caller in pm.get_hookcallers(plugin) or [])
        families = _own(pm, plugin, "register_model_families") if "register_model_families" in hooks else []
        ops = _own(pm, plugin, "register_ops") if "register_ops" in hooks else []
        specs = _own(pm, plugin, "register_kernels") if "register_kernels" in hooks else []
        kernels = [{"op": s.op, "name": s.name, "priority": s.priority,
                    "devices": list(s.devices) if s.devices is not None else None} for s in specs]
        kernels += [{"op": c.name, "name": REFERENCE_NAME, "priority": 0, "devices": None} for c in ops]
        kernels.sort(key=lambda k: (k["op"], -k["priority"], k["name"]))
        out.append(
            {
                "name": name,
                "distribution": dist.metadata["Name"] if dist is not None else None,
                "version": dist.version if dist is not None else None,
                "hooks": hooks,
                "families": [{"name": f.name, "model_types": list(f.model_types),
                              "architectures": list(f.architectures),
                              "gguf_architectures": list(f.gguf_architectures), "tasks": list(f.tasks)}
                             for f in families],
                "tasks": [t.name for t in _own(pm, plugin, "register_tasks")] if "register_tasks" in hooks else [],
                "ops": sorted(c.name for c in ops),
                "kernels": kernels,
            }
        )
    return out
