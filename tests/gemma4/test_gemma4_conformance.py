"""anna-gemma4 passes the family conformance suite (:mod:`anna_core.testing.conformance`): a tiny random
Gemma 4 of the E2B style (sliding-window and global groups, KV sharing, per-layer inputs), prompts longer
than its 16-token window, and its parsers (the ``<|channel>thought ... <channel|>`` reasoning and
``<|tool_call>call:NAME{...}<tool_call|>`` calls) on completions written as Gemma 4 writes them. The tiny
tokenizer carries Gemma 4's chat-format tags as single tokens (``markup=True``), so a prompt that pre-fills
``<|channel>`` ends in that token's id, as the reasoning parser needs."""

import pytest
from anna_core.testing.conformance import FamilyConformance
from anna_core.testing.parser_streams import ParserSample

from tests.gemma4.tiny import WINDOW, build_tiny_gemma4

S = '<|"|>'
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"},
    "hours": {"type": "array", "items": {"type": "integer"}}}}}}
THINKING = "<|turn>model\n"
"""The end of a prompt Gemma 4's template rendered with thinking on: the model opens the channel itself."""
NOT_THINKING = "<|turn>model\n<|channel>thought\n<channel|>"
"""With thinking off the template pre-fills an empty, closed channel."""
OPEN_CHANNEL = "<|turn>model\n<|channel>"
"""A template that pre-fills the channel's opening: the output starts with the channel's name."""


def call(name, arguments):
    return f"<|tool_call>call:{name}{{{arguments}}}<tool_call|>"


GEMMA_SAMPLES = (
    ParserSample(
        name="thinking, an answer, a call",
        prompt=THINKING,
        output="<|channel>thought\nThe user wants Paris, 3 days.<channel|>Let me check. "
               + call("get_weather", f"city:{S}Paris{S},days:3"),
        reasoning="The user wants Paris, 3 days.", content="Let me check.",
        tool_calls=[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}], tools=[WEATHER]),
    ParserSample(
        name="thinking off, a plain answer",
        prompt=NOT_THINKING, output='Rome: 21 °C {"sunny"}, a < b, call: none. 🙂',
        content='Rome: 21 °C {"sunny"}, a < b, call: none. 🙂', tools=[WEATHER]),
    ParserSample(
        name="a pre-filled channel, two calls",
        prompt=OPEN_CHANNEL,
        output="thought\nTwo cities.\n<channel|>\n" + call("get_weather", f"city:{S}Lyon{S}")
               + call("get_weather", f"city:{S}New York, NY {{USA}}{S},days:2,metric:true,hours:[6,12]"),
        reasoning="Two cities.",
        tool_calls=[{"name": "get_weather", "arguments": {"city": "Lyon"}},
                    {"name": "get_weather", "arguments": {"city": "New York, NY {USA}", "days": 2, "metric": True,
                                                          "hours": [6, 12]}}],
        tools=[WEATHER]),
    ParserSample(
        name="a call sketched in the channel stays reasoning",
        prompt=THINKING,
        output="<|channel>thought\nI could write " + call("get_weather", f"city:{S}Rome{S}")
               + " later.\n<channel|>\nRome is warm.",
        reasoning="I could write " + call("get_weather", f"city:{S}Rome{S}") + " later.", content="Rome is warm.",
        tools=[WEATHER]),
)


class TestGemma4Conformance(FamilyConformance):
    family = "gemma4"
    prompt_length = 3 * WINDOW
    parser_samples = GEMMA_SAMPLES

    def build_checkpoint(self, path):
        build_tiny_gemma4(path, variant="e2b", layout="causal", markup=True, seed=4)


def test_the_tiny_tokenizer_carries_gemma4_markup(tmp_path):
    """``markup=True`` gives the tiny tokenizer every chat-format tag as one token of the released kind, and the
    reasoning parser built on it finds the channel's ids."""
    from anna_core.errors import ModelLoadError
    from anna_core.testing.checkpoints import build_tiny_tokenizer
    from anna_core.tokenizer import Tokenizer
    from anna_gemma4.reasoning import Gemma4ReasoningParser
    from anna_gemma4.tokenizer import check_markup

    build_tiny_tokenizer(tmp_path / "plain")  # what build_tiny_gemma4 writes without markup
    with pytest.raises(ModelLoadError, match="not one token"):
        check_markup(Tokenizer.from_pretrained(tmp_path / "plain"))
    build_tiny_gemma4(tmp_path / "markup", markup=True)
    tok = Tokenizer.from_pretrained(tmp_path / "markup")
    ids = check_markup(tok)
    parser = Gemma4ReasoningParser(tok)
    assert (parser.open_id, parser.end_token_id) == (ids["<|channel>"], ids["<channel|>"])
    assert tok.encode(OPEN_CHANNEL)[-1] == ids["<|channel>"]
