"""The Qwen3 family passes the family conformance suite (:mod:`anna_core.testing.conformance`) on its own tiny
checkpoint, and its parsers (Qwen's ``<think>`` blocks, Qwen3's JSON tool calls) on completions written as Qwen3
writes them."""

import json

from anna_core.testing.conformance import FamilyConformance
from anna_core.testing.parser_streams import ParserSample
from anna_qwen35.qwen3.tiny import build_tiny_checkpoint

from tests.qwen35.parser_samples import NOT_THINKING, THINKING, WEATHER


def qwen3_call(name, **arguments):
    """A call as Qwen3's chat template shows it to the model."""
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}\n</tool_call>"


QWEN3_SAMPLES = (
    ParserSample(
        name="thinking, an answer, a call",
        prompt=THINKING,
        output="The user wants Paris's weather for 3 days.\n</think>\n\nLet me look that up.\n\n"
               + qwen3_call("get_weather", city="Paris", days=3),
        reasoning="The user wants Paris's weather for 3 days.", content="Let me look that up.",
        tool_calls=[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}], tools=[WEATHER]),
    ParserSample(
        name="two calls, no text, non-ASCII arguments",
        prompt=NOT_THINKING,
        output=qwen3_call("get_weather", city="São Paulo") + "\n" + qwen3_call("get_weather", city="東京", unit="C"),
        tool_calls=[{"name": "get_weather", "arguments": {"city": "São Paulo"}},
                    {"name": "get_weather", "arguments": {"city": "東京", "unit": "C"}}], tools=[WEATHER]),
    ParserSample(
        name="a call cuts the reasoning short",
        prompt=THINKING, output="I should call the tool.\n" + qwen3_call("get_weather", city="Oslo"),
        reasoning="I should call the tool.", tool_calls=[{"name": "get_weather", "arguments": {"city": "Oslo"}}],
        tools=[WEATHER]),
    ParserSample(
        name="a body that is not a call stays content",
        prompt=NOT_THINKING, output='Try this: <tool_call>\n{"city": "Rome"}\n</tool_call> and see.',
        content='Try this: <tool_call>\n{"city": "Rome"}\n</tool_call> and see.', tools=[WEATHER]),
    ParserSample(name="thinking, then an answer", prompt=THINKING,
                 output="Paris is the capital; answer briefly.\n</think>\n\nThe capital of France is Paris.",
                 reasoning="Paris is the capital; answer briefly.", content="The capital of France is Paris."),
    ParserSample(name="thinking off, a plain answer", prompt=NOT_THINKING,
                 output="It is 21 °C in Paris < 25 °C in Nice {usually}. 🙂",
                 content="It is 21 °C in Paris < 25 °C in Nice {usually}. 🙂"),
    ParserSample(name="the output opens <think>", output="<think>Short.</think>\n\nYes.", reasoning="Short.",
                 content="Yes."),
    ParserSample(name="cut off while thinking", prompt=THINKING, output="Still thinking about </thin",
                 reasoning="Still thinking about </thin"),
)


class TestQwen3Conformance(FamilyConformance):
    family = "qwen3"
    greedy_tokens = 32
    parser_samples = QWEN3_SAMPLES

    def build_checkpoint(self, path):
        build_tiny_checkpoint(path, tie=False, attention_bias=True, seed=11)


def test_registered_for_the_qwen3_family():
    from anna_core.parsers.loading import parser_factory
    from anna_core.plugins import model_families

    (qwen3,) = [f for f in model_families() if f.name == "qwen3"]
    assert (qwen3.reasoning_parser, qwen3.tool_call_parser) == ("qwen3", "qwen3_json")
    assert parser_factory("tool_call", "qwen3_json").__name__ == "Qwen3JsonToolParser"
