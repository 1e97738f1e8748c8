"""Chat messages parsed for the chat template: roles, text and media content parts, assistant reasoning and tool
calls, tool results.

Content parts are flattened to one string where a message is all text; a message with ``image_url`` /
``video_url`` parts keeps them in order for the template, its URLs collected by modality.
"""

from __future__ import annotations

import json
from typing import Any

from anna_core.server.json_fields import field_error

_ROLES = frozenset(("system", "developer", "user", "assistant", "tool"))

MEDIA_PARTS = {"image_url": "image", "video_url": "video"}
"""Content part types that carry a medium, and the part the chat template sees for each."""


def _flatten_content(content: Any, where: str, media_urls: dict[str, list[str]]) -> str | list[dict[str, Any]] | None:
    """A message's content for the chat template: text parts joined by newlines into one string; a message with
    ``image_url`` / ``video_url`` parts keeps its parts in order as ``{"type": "text", "text": ...}`` /
    ``{"type": "image"}`` / ``{"type": "video"}`` (the template writes the model's placeholders), the URLs appended
    to ``media_urls["image"]`` / ``media_urls["video"]``."""
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise field_error(f"'{where}' must be a string or an array of content parts", where)
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        here = f"{where}[{j}]"
        if not isinstance(part, dict):
            raise field_error(f"'{here}' must be an object", here)
        kind = part.get("type")
        if kind in MEDIA_PARTS:
            media_urls[MEDIA_PARTS[kind]].append(_media_url(part.get(kind), f"{here}.{kind}"))
            parts.append({"type": MEDIA_PARTS[kind]})
            continue
        if kind != "text":
            raise field_error(f"content part type {kind!r} is not supported; only 'text', 'image_url' and 'video_url' "
                        "parts are", f"{here}.type")
        if not isinstance(part.get("text"), str):
            raise field_error(f"'{here}.text' must be a string", f"{here}.text")
        parts.append({"type": "text", "text": part["text"]})
    if any(p["type"] != "text" for p in parts):
        return parts
    return "\n".join(p["text"] for p in parts)


def _media_url(value: Any, where: str) -> str:
    """The URL of an ``image_url`` / ``video_url`` part: ``{"url": ..., "detail": ...}`` (``detail`` accepted, not
    used) or a bare string."""
    if isinstance(value, dict):
        detail = value.get("detail", "auto")
        if detail not in ("auto", "low", "high"):
            raise field_error(f"'{where}.detail' must be 'auto', 'low' or 'high', got {detail!r}", f"{where}.detail")
        value = value.get("url")
        where += ".url"
    if not isinstance(value, str) or not value:
        raise field_error(f"'{where}' must be a non-empty string (a data: URI or an http(s) URL)", where)
    return value


def parse_messages(value: Any) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    """The messages and the URLs of their media by modality (``{"image": [...], "video": [...]}``), in order."""
    if not isinstance(value, list) or not value:
        raise field_error("'messages' must be a non-empty array", "messages")
    out: list[dict[str, Any]] = []
    media_urls: dict[str, list[str]] = {"image": [], "video": []}
    for i, msg in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(msg, dict):
            raise field_error(f"'{where}' must be an object", where)
        role = msg.get("role")
        if role not in _ROLES:
            raise field_error(f"'{where}.role' must be one of {sorted(_ROLES)}, got {role!r}", f"{where}.role")
        content = _flatten_content(msg.get("content"), f"{where}.content", media_urls)
        if content is None and role != "assistant":
            raise field_error(f"'{where}.content' is required", f"{where}.content")
        parsed = {**msg, "content": content}
        if role == "assistant":
            parsed.update(_assistant_fields(msg, where))
            if parsed["content"] is None:  # beside tool calls: templates concatenate content, as vLLM renders it
                parsed["content"] = ""
            if not parsed.get("tool_calls"):  # null or []: a plain turn
                parsed.pop("tool_calls", None)
        elif role == "tool" and not isinstance(msg.get("tool_call_id"), str):
            # as the OpenAI API: a tool result names the call it answers
            raise field_error(f"'{where}.tool_call_id' must be the id (a string) of the call this message answers",
                        f"{where}.tool_call_id")
        out.append(parsed)
    return out, media_urls


def _assistant_fields(msg: dict[str, Any], where: str) -> dict[str, Any]:
    """Reasoning under both names and tool calls with object arguments, as chat templates expect."""
    fields: dict[str, Any] = {}
    reasoning = msg.get("reasoning_content", msg.get("reasoning"))
    if reasoning is not None:
        if not isinstance(reasoning, str):
            raise field_error(f"'{where}.reasoning_content' must be a string", f"{where}.reasoning_content")
        fields["reasoning_content"] = fields["reasoning"] = reasoning
    calls = msg.get("tool_calls")
    if not calls and isinstance(calls, (list, type(None))):
        if msg.get("content") is None and reasoning is None:
            raise field_error(f"'{where}.content' is required", f"{where}.content")
        return fields
    if not isinstance(calls, list):
        raise field_error(f"'{where}.tool_calls' must be an array", f"{where}.tool_calls")
    parsed = []
    for j, call in enumerate(calls):
        here = f"{where}.tool_calls[{j}]"
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise field_error(f"'{here}.function.name' must be a string", f"{here}.function")
        args = fn.get("arguments", "{}")
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except ValueError:
                raise field_error(f"'{here}.function.arguments' must be a JSON object", f"{here}.function.arguments") from None
        if not isinstance(args, dict):
            raise field_error(f"'{here}.function.arguments' must be a JSON object", f"{here}.function.arguments")
        parsed.append({"id": call.get("id"), "type": "function", "function": {"name": fn["name"], "arguments": args}})
    fields["tool_calls"] = parsed
    return fields
