"""The chat template carried by Gemma 4's GGUF, rendered through Anna's tokenizer: a system + user +
assistant (tool call) + tool + assistant + user conversation with tools, thinking off and on; and
llama.cpp's later Gemma 4 template given as ``--chat-template`` (OpenAI ``role: tool`` messages become
tool responses there)."""

from __future__ import annotations

import pytest

from tests.gemma4.vocab_files import gemma4_tokenizer, gemma4_vocab_dir

pytest.importorskip("anna_gemma4")

S = '<|"|>'
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather",
    "parameters": {"type": "object", "required": ["city"], "properties": {
        "city": {"type": "string", "description": "City name"}, "days": {"type": "integer"}}}}}]
MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Rome?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Rome", "days": 2}}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'},
    {"role": "assistant", "content": "21 degrees."},
    {"role": "user", "content": "Thanks"},
]
DECLARATION = (f"<|tool>declaration:get_weather{{description:{S}Current weather{S},parameters:{{properties:{{"
               f"city:{{description:{S}City name{S},type:{S}STRING{S}}},days:{{type:{S}INTEGER{S}}}}},"
               f"required:[{S}city{S}],type:{S}OBJECT{S}}}}}<tool|>")
CALL = f"<|tool_call>call:get_weather{{city:{S}Rome{S},days:2}}<tool_call|>"


def expected(thinking: bool) -> str:
    """The GGUF template's rendering: the tool result is a turn of role ``tool``."""
    return ("<bos><|turn>system\n" + ("<|think|>" if thinking else "") + "You are terse." + DECLARATION + "<turn|>\n"
            "<|turn>user\nWeather in Rome?<turn|>\n"
            "<|turn>model\n" + CALL + "<turn|>\n"
            '<|turn>tool\n{"temp": 21}<turn|>\n'
            "<|turn>model\n21 degrees.<turn|>\n"
            "<|turn>user\nThanks<turn|>\n"
            "<|turn>model\n" + ("" if thinking else "<|channel>thought\n<channel|>"))


@pytest.fixture(scope="module")
def tok():
    return gemma4_tokenizer()


@pytest.mark.parametrize("thinking", [False, True])
def test_gguf_template_renders_the_conversation(tok, thinking):
    assert tok.apply_chat_template(MESSAGES, tools=TOOLS, enable_thinking=thinking) == expected(thinking)


def test_thinking_defaults_to_off_with_an_empty_channel(tok):
    # no enable_thinking: the template pre-fills an empty thought channel, so the model answers at once
    assert tok.apply_chat_template(MESSAGES, tools=TOOLS) == expected(False)
    assert tok.apply_chat_template([{"role": "user", "content": "Hi"}], enable_thinking=True) == (
        "<bos><|turn>system\n<|think|><turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n")


def test_rendering_tokenizes_to_single_markup_ids(tok):
    ids = tok.encode(expected(True))
    assert ids[:3] == [2, 105, 9731]  # <bos> <|turn> system
    assert [ids.count(i) for i in (98, 46, 47, 48, 49, 105, 106)] == [1, 1, 1, 1, 1, 7, 6]
    assert ids.count(52) == expected(True).count(S) == 14
    assert tok.decode(ids, skip_special_tokens=False) == expected(True)


def test_check_chat_template_passes(tok):
    tok.check_chat_template()


def test_llama_cpp_later_template_as_chat_template_override(tok):
    import copy

    from anna_core.tokenizer import Tokenizer

    # as --chat-template FILE does, on a copy so the shared tokenizer keeps the file's own template
    later = Tokenizer(copy.copy(tok.hf), chat_template=(gemma4_vocab_dir() / "google-gemma-4-31B-it.jinja").read_text())
    text = later.apply_chat_template(MESSAGES, tools=TOOLS, enable_thinking=False)
    assert text == ("<bos><|turn>system\nYou are terse." + DECLARATION + "<turn|>\n"
                    "<|turn>user\nWeather in Rome?<turn|>\n"
                    "<|turn>model\n" + CALL +
                    f'<|tool_response>response:get_weather{{value:{S}{{"temp": 21}}{S}}}<tool_response|>'
                    "21 degrees.<turn|>\n"
                    "<|turn>user\nThanks<turn|>\n"
                    "<|turn>model\n<|channel>thought\n<channel|>")
    assert tok.apply_chat_template(MESSAGES, tools=TOOLS) == expected(False)  # the shared tokenizer is unchanged
