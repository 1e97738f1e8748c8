"""Decode a request body once, centrally, before any handler looks at it.

JSON allows ``\\ud800``-style escapes that decode to lone UTF-16 surrogates: Python strings that
are not valid Unicode text and cannot be encoded as UTF-8. Left in, they crash the tokenizer and
the response encoder (HTTP 500). :func:`json_body` rejects them with a 400 whose ``param`` is the
JSON path of the offending string (``messages[0].content``); the message never repeats the
string itself. Bodies nested deeper than the JSON decoder can follow are a 400 too. A body whose
``Content-Type`` is not ``application/json`` is a 415 and is never parsed: a browser sends a
``text/plain`` or form POST cross-site without asking, and it must not start a generation.
Decoding a large body is CPU work: it runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from litestar import Request

from anna_core.errors import InvalidRequestError
from anna_core.server.errors import UnsupportedMediaTypeError


async def json_body(request: Request) -> Any:
    """The request's JSON body, with every string (keys included) valid Unicode.

    Raises:
        UnsupportedMediaTypeError: the ``Content-Type`` is not ``application/json``.
        InvalidRequestError: the body is not JSON, is nested too deeply, or holds a lone
            surrogate (``param`` names where).
    """
    content_type = (request.headers.get("content-type") or "").split(";", 1)[0].strip().lower()
    if content_type != "application/json":
        shown = f"'{content_type}'" if content_type else "none"
        raise UnsupportedMediaTypeError(f"this route takes a JSON body: send 'Content-Type: application/json' "
                                        f"(got {shown})")
    raw = await request.body()
    return await asyncio.to_thread(_decode, raw)


def _decode(raw: bytes) -> Any:
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidRequestError(f"the request body is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise InvalidRequestError("the request body is nested too deeply") from exc
    except ValueError as exc:  # an integer literal past Python's digit limit (sys.get_int_max_str_digits)
        raise InvalidRequestError(f"the request body is not valid JSON: {exc}") from exc
    check_text(body)
    return body


def _is_text(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_text(value: Any) -> None:
    """Raise unless every string in the decoded JSON ``value`` encodes as UTF-8.

    The common case costs one C-level encode of the whole document; only a failing document is
    walked (iteratively, so depth is no problem) to name the first bad string's path.

    Raises:
        InvalidRequestError: ``param`` is the JSON path (``prompt[1]``, ``messages[0].content``;
            for a bad object key, the path of the object).
    """
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
        return
    except (UnicodeEncodeError, RecursionError):
        pass
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            if not _is_text(item):
                _reject(path, "")
        elif isinstance(item, dict):
            children = []
            for key, child in item.items():
                if not _is_text(key):
                    _reject(path, "a key of ")
                children.append((child, f"{path}.{key}" if path else key))
            stack.extend(reversed(children))
        elif isinstance(item, list):
            stack.extend(reversed([(child, f"{path}[{i}]") for i, child in enumerate(item)]))


def _reject(path: str, what: str) -> None:
    where = f"{what}'{path}'" if path else f"{what}the body"
    raise InvalidRequestError(
        f"{where} contains a lone UTF-16 surrogate (a \\u escape in the range D800-DFFF without its pair), "
        "which is not valid Unicode text", param=path or None)
