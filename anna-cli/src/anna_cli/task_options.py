"""The flags tasks declare (:class:`anna_core.registry.TaskOption`), added to ``anna serve`` and read back.

``anna serve`` takes the options of every installed task (``--asr-aligner-dir`` of ``transcribe``, ...); the
values set for the served task go to its ``build`` as keyword arguments (or, for ``stage="load"`` options, to the
family's loader through ``load_model(family_options=...)``), and a flag of another task is refused before anything
loads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

_TYPES: dict[str, Any] = {
    "str": str,
    "int": click.IntRange(min=1),
    "float": float,
    "path": click.Path(exists=True, file_okay=False, path_type=Path),
}


def click_option(option: Any) -> click.Option:
    """The click option of a :class:`~anna_core.registry.TaskOption`."""
    if option.kind == "flag":
        return click.Option([option.flag, option.name], is_flag=True, default=bool(option.default), help=option.help)
    return click.Option([option.flag, option.name], type=_TYPES[option.kind], default=option.default,
                        help=option.help, show_default=option.default is not None)


def add_task_options(command: click.Command, tasks: list[Any]) -> None:
    """Add every task's options to ``command`` (each once; one already there is left as it is)."""
    present = {p.name for p in command.params}
    for task in tasks:
        for option in task.options:
            if option.name not in present:
                command.params.append(click_option(option))
                present.add(option.name)


def pop_task_options(options: dict[str, Any], tasks: list[Any], served: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Remove every task option from ``options``; return the served task's that were set (not None / False /
    their default) as ``(build options, family load options)`` by their ``stage``.

    Raises:
        AnnaError: a flag of another task was set.
    """
    from anna_core.errors import AnnaError

    chosen: dict[str, dict[str, Any]] = {"build": {}, "load": {}}
    own = {o.name for o in served.options}
    for task in tasks:
        for option in task.options:
            if option.name not in options:
                continue
            value = options.pop(option.name)
            if value is None or value is False or value == option.default:
                continue
            if option.name not in own:
                raise AnnaError(f"{option.flag} is a setting of the {task.name!r} task; this model serves "
                                f"{served.name!r}")
            chosen[option.stage][option.name] = value
    return chosen["build"], chosen["load"]
