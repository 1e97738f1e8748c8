"""Find output parsers by name among the plugins' ``register_output_parsers`` registrations.

A registration is an :class:`~anna_core.registry.OutputParserSpec` whose ``factory`` is a lazy
``"module:attr"`` of a class (or callable) taking the tokenizer -- and, for tool-call parsers,
``tools=`` the request's tools -- and returning one parser for one response choice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pluggy

from anna_core.errors import AnnaError
from anna_core.registry import resolve

KINDS = ("reasoning", "tool_call")


def parser_factory(kind: str, name: str, pm: pluggy.PluginManager | None = None) -> Callable[..., Any]:
    """The factory registered as ``name`` for ``kind``.

    Raises:
        AnnaError: unknown kind, or no plugin registered that name (the message lists the names).
    """
    from anna_core import plugins

    if kind not in KINDS:
        raise AnnaError(f"parser kind must be one of {KINDS}, got {kind!r}")
    specs = [s for s in plugins.output_parsers(pm) if s.kind == kind]
    for spec in specs:
        if spec.name == name:
            return resolve(spec.factory)
    known = sorted(s.name for s in specs) or ["(none installed)"]
    raise AnnaError(f"unknown {kind.replace('_', '-')} parser {name!r}; installed: {', '.join(known)}")
