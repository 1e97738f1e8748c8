"""Completions written as Qwen3.5 writes them (``<think>`` reasoning, Qwen3-Coder XML calls) and what the family's
parsers must make of them: the ``parser_samples`` of the dense and MoE conformance classes."""

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
