"""anna_core.testing.parser_streams: a sample passes whole and at every split with parsers that stream right, and
fails naming the sample with a wrong expectation or a parser that loses a tag cut across two deltas; an output
given as token ids streams through the engine's detokenizer; OpenAI's tool-call phases are checked."""

from __future__ import annotations

import pytest
from anna_core.parsers.base import ToolCallDelta
from anna_core.parsers.qwen3_coder import Qwen3CoderToolParser
from anna_core.parsers.think import ThinkReasoningParser
from anna_core.testing.parser_streams import (
    Parsed,
    ParserSample,
    check_sample,
    collect_calls,
    parse_stream,
    splits,
    token_deltas,
)
from anna_core.tokenizer import Tokenizer

TOOL = {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {
    "a": {"type": "integer"}, "b": {"type": "integer"}, "note": {"type": "string"}}}}}
CALL = "<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n<parameter=note>\nx < y\n</parameter>\n" \
       "</function>\n</tool_call>"
SAMPLE = ParserSample(name="think, answer, call", prompt="<|im_start|>assistant\n<think>\n",
                      output="Add them.\n</think>\n\nSure.\n" + CALL, reasoning="Add them.", content="Sure.",
                      tool_calls=[{"name": "add", "arguments": {"a": 1, "note": "x < y"}}], tools=[TOOL])


@pytest.fixture(scope="module")
def tok(anna_tiny_tokenizer_dir):
    return Tokenizer.from_pretrained(anna_tiny_tokenizer_dir)


def qwen_parsers(tok):
    return {"reasoning": lambda: ThinkReasoningParser(tok),
            "tool": lambda tools: Qwen3CoderToolParser(tok, tools=tools)}


def test_a_sample_parses_whole_and_at_every_split(tok):
    whole = check_sample(SAMPLE, tokenizer=tok, **qwen_parsers(tok))
    assert whole == Parsed("Add them.", "Sure.", ({"name": "add", "arguments": {"a": 1, "note": "x < y"}},))
    # the prompt decides: without the pre-filled <think> the same output is all answer
    unprompted = parse_stream([SAMPLE.output], reasoning=ThinkReasoningParser(tok),
                              tool=Qwen3CoderToolParser(tok, tools=[TOOL]))
    assert unprompted.reasoning == "" and unprompted.content.startswith("Add them.\n</think>")


def test_a_wrong_expectation_fails_naming_the_sample(tok):
    import attrs

    wrong = attrs.evolve(SAMPLE, tool_calls=[{"name": "add", "arguments": {"a": "1", "note": "x < y"}}])
    with pytest.raises(AssertionError, match=r"(?s)^in the suite: the parsers made of the whole output.*'a': 1"):
        check_sample(wrong, tokenizer=tok, label="in the suite", **qwen_parsers(tok))


class TagInOneDelta:
    """A reasoning parser right on whole text that misses ``</think>`` cut across two deltas."""

    end_token_id = None
    in_reasoning = True

    def start(self, prompt_token_ids, interrupt_tags=()):
        self.in_reasoning = True

    def feed(self, text):
        if self.in_reasoning and "</think>" in text:
            self.in_reasoning = False
            before, after = text.split("</think>", 1)
            return [(k, t) for k, t in (("reasoning", before), ("content", after)) if t]
        return [("reasoning" if self.in_reasoning else "content", text)] if text else []

    def finish(self):
        return []


def test_a_parser_that_breaks_when_streamed_fails_showing_the_pieces():
    sample = ParserSample(output="abc</think>def", reasoning="abc", content="def", name="cut tag")
    with pytest.raises(AssertionError, match=r"cut tag: streamed as \['abc<', '/think>def'\]"):
        check_sample(sample, reasoning=TagInOneDelta, tool=None)


def test_an_output_of_token_ids_streams_through_the_detokenizer(tok):
    text = "Think 🙂 more.\n</think>\n\nDone 日本."
    ids = tok.encode(text)
    deltas = token_deltas(tok, tok.encode("<think>\n"), ids)
    assert "".join(deltas) == text and len(deltas) > 5
    assert not any("\ufffd" in d for d in deltas)  # a character split across tokens waits for its last byte
    sample = ParserSample(output=ids, prompt=tok.encode("<think>\n"), reasoning="Think 🙂 more.", content="Done 日本.")
    assert check_sample(sample, reasoning=lambda: ThinkReasoningParser(tok), tool=None, tokenizer=tok).content == \
        "Done 日本."
    with pytest.raises(ValueError, match="need the tokenizer"):
        check_sample(sample, reasoning=lambda: ThinkReasoningParser(tok), tool=None)


def test_collect_calls_checks_openai_phases():
    first = ToolCallDelta(0, id="call_1", name="f")
    assert collect_calls([first, ToolCallDelta(0, arguments='{"x": '), ToolCallDelta(0, arguments="1}")]) == [
        {"name": "f", "arguments": {"x": 1}}]
    with pytest.raises(AssertionError, match="first piece must carry index 0"):
        collect_calls([ToolCallDelta(1, id="call_1", name="f")])
    with pytest.raises(AssertionError, match="first piece"):
        collect_calls([ToolCallDelta(0, id="call_1", name="f", arguments="{}")])
    with pytest.raises(AssertionError, match="argument piece must carry only index"):
        collect_calls([ToolCallDelta(0, arguments="{}")])
    with pytest.raises(AssertionError, match="NaN"):
        collect_calls([first, ToolCallDelta(0, arguments='{"x": NaN}')])
    with pytest.raises(AssertionError, match="not JSON"):
        collect_calls([first, ToolCallDelta(0, arguments='{"x": ')])


def test_splits_cut_everywhere_and_rejoin():
    cuts = list(splits("abcde", random_splits=5, seed=1))
    assert cuts[:4] == [["a", "bcde"], ["ab", "cde"], ["abc", "de"], ["abcd", "e"]]
    assert cuts[4] == list("abcde") and len(cuts) == 10
    assert all("".join(c) == "abcde" and all(c) for c in cuts)
    assert cuts == list(splits("abcde", random_splits=5, seed=1))


@pytest.mark.parametrize("kwargs, match", [
    ({"output": ""}, "output is empty"),
    ({"output": [1, -2]}, "token ids"),
    ({"output": "x", "tool_calls": [{"name": "f"}]}, "each call is"),
    ({"output": "x", "tool_calls": [{"name": "f", "arguments": "{}"}]}, "each call is"),
])
def test_a_malformed_sample_is_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ParserSample(**kwargs)


def test_check_sample_needs_a_parser():
    with pytest.raises(ValueError, match="needs a reasoning parser"):
        check_sample(ParserSample(output="x"), reasoning=None, tool=None)
