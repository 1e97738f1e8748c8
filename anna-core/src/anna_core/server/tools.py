"""Validation of ``tools``, ``tool_choice``, ``parallel_tool_calls`` and ``response_format``.

Only function tools exist in the chat API. ``tool_choice`` is ``"none"`` (the tools are not shown
to the model and nothing is parsed), ``"auto"`` (the default when tools are given), ``"required"``
or ``{"type": "function", "function": {"name": ...}}``; the last two are enforced by a grammar
(:meth:`anna_core.parsers.base.ToolCallParser.grammar`, or JSON under the tools' schemas when the
server has no tool-call parser: :mod:`anna_core.parsers.json_calls`). The ``parameters`` schema
of every tool is checked here, whatever ``tool_choice`` is, the way xgrammar converts it (an
unusable one -- an unknown type, a dangling ``$ref``, a bad ``pattern``, ``minLength`` over
``maxLength`` -- is a 400 naming the tool), after the size and depth limits of
:mod:`anna_core.server.limits`. ``response_format`` ``json_object`` / ``json_schema`` become a
:class:`~anna_core.engine.sampling_params.StructuredOutput`, under the same limits. These checks
are CPU work: the routes run them off the event loop.
"""

from __future__ import annotations

import json
from typing import Any

import attrs

from anna_core.engine.logits_processors import xgrammar_reason
from anna_core.engine.sampling_params import StructuredOutput
from anna_core.errors import InvalidRequestError
from anna_core.server.limits import check_schema

_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")


def _fail(message: str, param: str) -> InvalidRequestError:
    return InvalidRequestError(message, param=param)


@attrs.frozen
class ToolSetup:
    """The request's tool settings.

    Attributes:
        tools: the validated function tools (OpenAI shape), empty when none.
        choice: ``"none"``, ``"auto"``, ``"required"`` or ``"function"`` (see ``function``).
        function: the function ``tool_choice`` names.
        parallel: ``parallel_tool_calls`` (several calls allowed in one answer).
    """

    tools: list[dict[str, Any]] = attrs.field(factory=list)
    choice: str = "none"
    function: str | None = None
    parallel: bool = True

    @property
    def parse_calls(self) -> bool:
        return bool(self.tools) and self.choice != "none"

    @property
    def forced(self) -> bool:
        return self.choice in ("required", "function")

    @property
    def callable(self) -> list[int]:
        """Indices into ``tools`` of the functions a forced choice may call (empty unless forced)."""
        if not self.forced:
            return []
        return [i for i, t in enumerate(self.tools) if self.function in (None, t["function"]["name"])]


def _parse_tool(tool: Any, where: str) -> dict[str, Any]:
    if not isinstance(tool, dict) or tool.get("type", "function") != "function":
        raise _fail(f"'{where}.type' must be 'function'", f"{where}.type")
    fn = tool.get("function")
    if not isinstance(fn, dict):
        raise _fail(f"'{where}.function' must be an object", f"{where}.function")
    name = fn.get("name")
    if not isinstance(name, str) or not name or len(name) > 64 or not set(name) <= _NAME_CHARS:
        raise _fail(f"'{where}.function.name' must be 1-64 characters of a-z, A-Z, 0-9, _, - or .",
                    f"{where}.function.name")
    params = fn.get("parameters", {"type": "object", "properties": {}})
    if not isinstance(params, dict):
        raise _fail(f"'{where}.function.parameters' must be a JSON schema object", f"{where}.function.parameters")
    if params.get("type", "object") != "object":
        raise _fail(f"'{where}.function.parameters' must be a JSON schema of type 'object' (the arguments are a "
                    f"JSON object), got type {params.get('type')!r}", f"{where}.function.parameters")
    if not isinstance(params.get("properties", {}), dict):
        raise _fail(f"'{where}.function.parameters.properties' must be an object",
                    f"{where}.function.parameters")
    check_schema(params, f"{where}.function.parameters", f"the parameters of function {name!r}")
    out = {"type": "function", "function": {"name": name, "parameters": params}}
    if isinstance(fn.get("description"), str):
        out["function"]["description"] = fn["description"]
    if fn.get("strict") is not None:
        out["function"]["strict"] = bool(fn["strict"])
    return out


def parse_tools(body: dict[str, Any]) -> ToolSetup:
    """Validate ``tools`` / ``tool_choice`` / ``parallel_tool_calls``.

    Raises:
        InvalidRequestError: malformed tools, an unknown choice, or a named function not in tools.
    """
    raw = body.get("tools")
    if raw is None:
        raw = []
    if not isinstance(raw, list):
        raise _fail("'tools' must be an array", "tools")
    tools = [_parse_tool(t, f"tools[{i}]") for i, t in enumerate(raw)]
    names = [t["function"]["name"] for t in tools]
    if len(set(names)) != len(names):
        raise _fail("tool function names must be unique", "tools")
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise _fail("'parallel_tool_calls' must be a boolean", "parallel_tool_calls")
    choice = body.get("tool_choice")
    function = None
    if choice is None:
        choice = "auto" if tools else "none"
    elif isinstance(choice, dict):
        fn = choice.get("function")
        if choice.get("type") != "function" or not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise _fail("'tool_choice' must be 'none', 'auto', 'required' or "
                        "{'type': 'function', 'function': {'name': ...}}", "tool_choice")
        function = fn["name"]
        if function not in names:
            raise _fail(f"'tool_choice' names function {function!r}, which is not in 'tools'", "tool_choice")
        choice = "function"
    elif choice not in ("none", "auto", "required"):
        raise _fail(f"'tool_choice' must be 'none', 'auto', 'required' or a function, got {choice!r}", "tool_choice")
    if choice in ("required", "auto") and not tools and body.get("tool_choice") is not None:
        raise _fail(f"'tool_choice' = {choice!r} needs 'tools'", "tool_choice")
    setup = ToolSetup(tools=tools, choice=choice, function=function, parallel=True if parallel is None else parallel)
    for i, tool in enumerate(tools):  # every tool: the template shows them all, a parser may call any
        check_parameters_schema(tool["function"], f"tools[{i}].function.parameters")
    return setup


def check_parameters_schema(function: dict[str, Any], param: str) -> None:
    """Convert a function's ``parameters`` JSON schema with xgrammar, as a grammar built from it
    would be (no tokenizer needed), so that an unusable schema is refused before generation.

    Raises:
        InvalidRequestError: xgrammar rejects the schema (``param`` names the tool's parameters).
    """
    import xgrammar

    try:
        xgrammar.Grammar.from_json_schema(json.dumps(function["parameters"]), any_whitespace=False)
    except Exception as exc:  # xgrammar raises RuntimeError / ValueError with a useful message
        raise _fail(f"the parameters of function {function['name']!r} are not a usable JSON schema: "
                    f"{xgrammar_reason(exc)}", param) from exc


def parse_response_format(body: dict[str, Any]) -> StructuredOutput | None:
    """``response_format`` as a grammar spec (None for ``text`` / absent).

    Raises:
        InvalidRequestError: unknown type, or a ``json_schema`` without an object ``schema``.
    """
    value = body.get("response_format")
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("type") not in ("text", "json_object", "json_schema"):
        raise _fail("'response_format.type' must be 'text', 'json_object' or 'json_schema'", "response_format")
    kind = value["type"]
    if kind == "text":
        return None
    if kind == "json_object":
        return StructuredOutput("json_object")
    spec = value.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    if not isinstance(schema, dict):
        raise _fail("'response_format.json_schema.schema' must be a JSON schema object", "response_format")
    check_schema(schema, "response_format.json_schema.schema", "the response_format schema")
    return StructuredOutput("json_schema", json.dumps(schema))  # key order matters: properties come in order
