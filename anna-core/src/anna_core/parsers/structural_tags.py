"""Forced tool calls as xgrammar structural tags (``tool_choice`` ``"required"`` or a named function), shared by
the tool-call parsers whose format xgrammar knows by model name."""

from __future__ import annotations

from typing import Any

from anna_core.engine.sampling_params import StructuredOutput


def forced_tool_calls(model: str, tools: list[dict[str, Any]], function: str | None,
                      parallel: bool) -> StructuredOutput:
    """xgrammar's structural tag of ``model``'s call format (``xgrammar.get_model_structural_tag``, e.g.
    ``"qwen_3"``, ``"qwen_3_5"``): one call of the named ``function``, or of any of ``tools`` (one or more
    separated by newlines when ``parallel``, and nothing else), each call's arguments under its function's
    JSON schema.

    Raises:
        ValueError: ``function`` is not among ``tools``, or there are no tools.
    """
    import xgrammar
    from xgrammar.structural_tag import StructuralTag, TagsWithSeparatorFormat

    names = [t["function"]["name"] for t in tools]
    if not names:
        raise ValueError("tool_choice needs at least one tool")
    if function is not None and function not in names:
        raise ValueError(f"tool_choice names function {function!r}, which is not among the tools")
    choice: Any = "required" if function is None else {"type": "function", "function": {"name": function}}
    tag = xgrammar.get_model_structural_tag(model, tools=tools, tool_choice=choice, reasoning="disabled",
                                            parallel_tool_calls=parallel)
    if function is None:  # xgrammar's "required" lets text follow the first call: keep its calls only
        tag = StructuralTag(format=TagsWithSeparatorFormat(tags=tag.format.tags, separator="\n", at_least_one=True,
                                                           stop_after_first=not parallel))
    return StructuredOutput("structural_tag", tag.model_dump_json())
