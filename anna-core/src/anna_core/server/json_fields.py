"""Typed fields of a decoded JSON request body, read by hand so each error names its field.

Every reader returns None for a field that is absent or null and raises
:class:`~anna_core.errors.InvalidRequestError` (HTTP 400, OpenAI's ``param`` set to the field) for a value of
another JSON type, so a route's messages read alike: ``'n' must be an integer, got string``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from anna_core.errors import InvalidRequestError


def type_name(value: Any) -> str:
    """The JSON type name of a decoded value (``"integer"``, ``"array"`` ...; a Python type name otherwise)."""
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array",
            dict: "object", type(None): "null"}.get(type(value), type(value).__name__)


def field_error(message: str, param: str) -> InvalidRequestError:
    """The 400 error of a bad field: ``message`` for the client, ``param`` the field it names."""
    return InvalidRequestError(message, param=param)


def _typed(body: dict[str, Any], name: str, ok: Callable[[Any], bool], kind: str) -> Any:
    """``body[name]``, None when absent or null. Raises InvalidRequestError: a value ``ok`` rejects."""
    value = body.get(name)
    if value is not None and not ok(value):
        raise field_error(f"'{name}' must be {kind}, got {type_name(value)}", name)
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def int_field(body: dict[str, Any], name: str, minimum: int | None = None) -> int | None:
    """An integer field (booleans rejected), at least ``minimum`` when given.

    Raises:
        InvalidRequestError: not an integer, or below ``minimum``.
    """
    value = _typed(body, name, _is_int, "an integer")
    if value is not None and minimum is not None and value < minimum:
        raise field_error(f"'{name}' must be at least {minimum}, got {value}", name)
    return value


def number_field(body: dict[str, Any], name: str) -> float | None:
    """A number field as a float (booleans rejected). Raises InvalidRequestError: not a number, or an integer
    beyond float range."""
    value = _typed(body, name, lambda v: _is_int(v) or isinstance(v, float), "a number")
    if value is None:
        return None
    try:
        return float(value)
    except OverflowError:
        raise field_error(f"'{name}' is out of range", name) from None


def bool_field(body: dict[str, Any], name: str) -> bool | None:
    """A boolean field. Raises InvalidRequestError: not a boolean."""
    return _typed(body, name, lambda v: isinstance(v, bool), "a boolean")


def dict_field(body: dict[str, Any], name: str) -> dict[str, Any] | None:
    """An object field. Raises InvalidRequestError: not an object."""
    return _typed(body, name, lambda v: isinstance(v, dict), "an object")


def int_list_field(body: dict[str, Any], name: str) -> list[int]:
    """An array of integers (``[]`` when absent or null). Raises InvalidRequestError: anything else."""
    value = body.get(name)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        raise field_error(f"'{name}' must be an array of integers", name)
    return list(value)
