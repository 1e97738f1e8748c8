"""The compatibility table documents every request and response field the server knows."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from anna_core.server import protocol, responses

DOC = Path(__file__).resolve().parents[2] / "docs" / "openai-compatibility.md"


def _section(title: str) -> set[str]:
    text = DOC.read_text()
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    body = text[start:end if end > 0 else None]
    return set(re.findall(r"^\| `([^`]+)` \|", body, flags=re.MULTILINE))


@pytest.mark.parametrize(("title", "fields"), [
    ("Chat completions request", protocol.CHAT_FIELDS),
    ("Completions request", protocol.COMPLETION_FIELDS),
    ("Chat completion response", responses.CHAT_RESPONSE_FIELDS),
    ("Completion response", responses.COMPLETION_RESPONSE_FIELDS),
    ("Models", tuple(responses.model_body("m", 0, 1))),
])
def test_every_field_is_in_the_table(title, fields):
    documented = _section(title)
    assert not set(fields) - documented, f"undocumented in '{title}': {sorted(set(fields) - documented)}"


def test_every_route_is_mentioned():
    from anna_core.server import app, routes_generate

    text = DOC.read_text()
    handlers = [*routes_generate.ROUTES, *app.ALWAYS_ROUTES]
    paths = {path.replace("{model:path}", "{model}") for handler in handlers for path in handler.paths}
    assert "/v1/models/{model}" in paths and "/metrics" in paths
    assert not {p for p in paths if f"`{p}`" not in text and f" {p}`" not in text}


def test_table_rows_have_a_known_status():
    rows = re.findall(r"^\| `[^`]+` \| ([^|]+) \|", DOC.read_text(), flags=re.MULTILINE)
    assert rows and {r.strip() for r in rows} <= {"yes", "no", "ignored", "neutral only"}


def test_qwen35_names_its_parsers_and_registers_them():
    from anna_core.parsers.loading import parser_factory
    from anna_core.plugins import model_families

    (qwen,) = [f for f in model_families() if f.name == "qwen35"]
    assert (qwen.reasoning_parser, qwen.tool_call_parser) == ("qwen3", "qwen3_coder")
    assert parser_factory("reasoning", "qwen3").__name__ == "ThinkReasoningParser"
    assert parser_factory("tool_call", "qwen3_coder").__name__ == "Qwen3CoderToolParser"
    with pytest.raises(Exception, match=r"installed: (.*, )?qwen3_coder"):
        parser_factory("tool_call", "hermes")
