"""Entry module of anna-gemma4: registration only (cheap to import: factories are lazy strings)."""

from anna_core.hookspecs import hookimpl
from anna_core.registry import OutputParserSpec


@hookimpl
def register_output_parsers(register):
    # Gemma 4 thinks in a <|channel>thought ... <channel|> block and calls tools as
    # <|tool_call>call:NAME{key:<|"|>text<|"|>}<tool_call|>.
    register(OutputParserSpec(name="gemma4", kind="reasoning", factory="anna_gemma4.reasoning:Gemma4ReasoningParser"))
    register(OutputParserSpec(name="gemma4", kind="tool_call", factory="anna_gemma4.tool_calls:Gemma4ToolParser"))
