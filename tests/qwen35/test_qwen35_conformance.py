"""anna-qwen35 passes the family conformance suite (:mod:`anna_core.testing.conformance`): a tiny random
Qwen3.5 (gated DeltaNet and full-attention layers: a recurrent and a paged cache group), and its parsers (Qwen's
``<think>`` reasoning and Qwen3-Coder's XML tool calls) on completions written as Qwen3.5 writes them."""

from types import SimpleNamespace

import pytest
from anna_core.testing.checkpoints import build_tiny_qwen35
from anna_core.testing.conformance import FamilyConformance
from anna_core.testing.parser_streams import ParserSample

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "unit": {"enum": ["C", "F"]}}}}}
THINKING = "<|im_start|>assistant\n<think>\n"
"""The end of a prompt the chat template rendered with thinking on: the output starts inside ``<think>``."""
NOT_THINKING = "<|im_start|>assistant\n<think>\n\n</think>\n\n"


def qwen_call(name, **params):
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


QWEN_SAMPLES = (
    ParserSample(
        name="thinking, an answer, a call",
        prompt=THINKING,
        output="The user wants Paris's weather for 3 days.\n</think>\n\nLet me look that up.\n\n"
               + qwen_call("get_weather", city="Paris", days=3),
        reasoning="The user wants Paris's weather for 3 days.", content="Let me look that up.",
        tool_calls=[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}], tools=[WEATHER]),
    ParserSample(
        name="thinking off, a plain answer",
        prompt=NOT_THINKING, output="It is 21 °C in Paris < 25 °C in Nice {usually}. 🙂",
        content="It is 21 °C in Paris < 25 °C in Nice {usually}. 🙂", tools=[WEATHER]),
    ParserSample(
        name="the output opens <think>, two calls",
        output="<think>Two cities: two calls.</think>\n\n" + qwen_call("get_weather", city="Lyon") + "\n"
               + qwen_call("get_weather", city="New York", unit=" F "),
        reasoning="Two cities: two calls.",
        tool_calls=[{"name": "get_weather", "arguments": {"city": "Lyon"}},
                    {"name": "get_weather", "arguments": {"city": "New York", "unit": "F"}}], tools=[WEATHER]),
    ParserSample(
        name="a call cuts the reasoning short",
        prompt=THINKING, output="I should call the tool.\n" + qwen_call("get_weather", city="Oslo"),
        reasoning="I should call the tool.", tool_calls=[{"name": "get_weather", "arguments": {"city": "Oslo"}}],
        tools=[WEATHER]),
    ParserSample(
        name="cut off while thinking",
        prompt=THINKING, output="Still thinking about </thin", reasoning="Still thinking about </thin"),
)


class TestQwen35Conformance(FamilyConformance):
    family = "qwen35"
    parser_samples = QWEN_SAMPLES

    def build_checkpoint(self, path):
        build_tiny_qwen35(path, tie=False, seed=3)


@pytest.fixture
def loaded_tokenizer_only(anna_tiny_tokenizer_dir):
    """What the parser test reads of the loaded checkpoint: its tokenizer (the tiny one of every Qwen3.5 test)."""
    from anna_core.tokenizer import Tokenizer

    return SimpleNamespace(tokenizer=Tokenizer.from_pretrained(anna_tiny_tokenizer_dir))


def test_a_family_with_parsers_but_no_samples_fails(loaded_tokenizer_only):
    class NoSamples(FamilyConformance):
        family = "qwen35"

    with pytest.raises(pytest.fail.Exception, match=r"reasoning parser 'qwen3', tool-call parser 'qwen3_coder', but "
                                                     r"NoSamples.parser_samples is empty: declare"):
        NoSamples().test_parsers_on_scripted_streams(loaded_tokenizer_only)

    class NotASample(FamilyConformance):
        family = "qwen35"
        parser_samples = ({"output": "hi", "content": "hi"},)

    with pytest.raises(pytest.fail.Exception, match=r"parser_samples\[0\] is a dict, not a ParserSample"):
        NotASample().test_parsers_on_scripted_streams(loaded_tokenizer_only)


def test_a_sample_the_parsers_disagree_with_fails(loaded_tokenizer_only):
    import attrs

    class Wrong(TestQwen35Conformance):
        parser_samples = (QWEN_SAMPLES[0], attrs.evolve(QWEN_SAMPLES[1], prompt=THINKING))

    with pytest.raises(AssertionError, match=r"^parser_samples\[1\] \(thinking off, a plain answer\): the parsers "
                                             r"made of the whole output"):
        Wrong().test_parsers_on_scripted_streams(loaded_tokenizer_only)
