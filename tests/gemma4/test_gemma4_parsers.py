"""Gemma 4's output parsers: the thinking channel and the tool calls, streamed at every split."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
from anna_gemma4.reasoning import Gemma4ReasoningParser
from anna_gemma4.tool_calls import END, START, STR, Gemma4ToolParser, parse_call

OPEN_ID, CLOSE_ID = 100, 101
S = STR  # <|"|>


class FakeTokenizer:
    """Knows the channel tokens' ids, nothing else."""

    unk_token_id = 0
    _ids = {"<|channel>": OPEN_ID, "<channel|>": CLOSE_ID}

    def convert_tokens_to_ids(self, token: str) -> int:
        return self._ids.get(token, self.unk_token_id)


def splits(text: str, seed: int = 0) -> list[list[str]]:
    """The text whole, cut in two at every position, char by char, and at random boundaries."""
    out = [[text]] + [[text[:i], text[i:]] for i in range(1, len(text))] + [list(text)]
    rng = random.Random(seed)
    for _ in range(20):
        cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(1, 8)))) if len(text) > 1 else []
        out.append([text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])])
    return out


# -- reasoning --------------------------------------------------------------------------------

def run_reasoning(chunks, prompt=(), **kw) -> tuple[str, str]:
    p = Gemma4ReasoningParser(FakeTokenizer(), **kw)
    p.start(list(prompt), ("<|tool_call>",))
    segs = [s for c in chunks for s in p.feed(c)] + p.finish()
    assert all(kind in ("reasoning", "content") and text for kind, text in segs)
    return ("".join(t for k, t in segs if k == "reasoning"), "".join(t for k, t in segs if k == "content"))


REASONING_CASES = [
    # (prompt ids, output, reasoning, content)
    pytest.param([1, OPEN_ID], "thought\nLet me think.\n<channel|>\n\nThe answer.", "Let me think.", "The answer.",
                 id="name-in-output"),
    pytest.param([1, OPEN_ID, 7, 8], "Let me  think. \n<channel|>Answer  ", "Let me  think.", "Answer  ",
                 id="prefilled-name"),
    pytest.param([1, 2], "<|channel>thought\nHmm {x}<channel|> Answer", "Hmm {x}", "Answer", id="output-opens"),
    pytest.param([1, 2], "  <|channel>thought Hmm<channel|>Answer", "Hmm", "  Answer", id="space-before-open"),
    pytest.param([1, 2], "Just text <b> a <| b |> c", "", "Just text <b> a <| b |> c", id="no-reasoning"),
    pytest.param([1, OPEN_ID], "thought\nstill thinking <chan", "still thinking <chan", "", id="cut-off"),
    pytest.param([1, OPEN_ID], "thoug", "", "", id="cut-in-name"),
    pytest.param([OPEN_ID, 5, CLOSE_ID, 9], "Answer only", "", "Answer only", id="thinking-off"),
    pytest.param([1, OPEN_ID], "thought\n<|tool_call>call:f{a:1}<tool_call|> no <channel|>ok",
                 "<|tool_call>call:f{a:1}<tool_call|> no", "ok", id="call-inside-channel"),
    pytest.param([1, 2], "<|channel>final\nVisible<channel|> more", "", "Visible more", id="other-channel"),
    pytest.param([1, 2], "<|channel>\nnameless<channel|>x", "nameless", "x", id="nameless-channel"),
    pytest.param([1, OPEN_ID], "thought\nA<channel|>x <|channel>thought\nB\n<channel|>\ny", "AB", "x y",
                 id="interleaved"),
]


@pytest.mark.parametrize(("prompt", "text", "reasoning", "content"), REASONING_CASES)
def test_reasoning_at_every_split(prompt, text, reasoning, content):
    for chunks in splits(text):
        assert run_reasoning(chunks, prompt) == (reasoning, content), chunks


def test_reasoning_state_and_end_token():
    p = Gemma4ReasoningParser(FakeTokenizer())
    assert p.end_token_id == CLOSE_ID
    p.start([1, OPEN_ID])
    assert p.in_reasoning
    p.feed("thought\nx<channel|>")
    assert not p.in_reasoning
    p = Gemma4ReasoningParser(FakeTokenizer())
    p.start([OPEN_ID, CLOSE_ID])
    assert not p.in_reasoning


def test_prefilled_override_without_tokenizer():
    p = Gemma4ReasoningParser(None, prefilled=True)
    assert p.end_token_id is None
    p.start([1, 2, 3])
    assert p.in_reasoning
    assert p.feed("\nidea<channel|>done") == [("reasoning", "idea"), ("content", "done")]
    assert run_reasoning(["<|channel>thought x<channel|>y"], [1, OPEN_ID], prefilled=False) == ("x", "y")
    p = Gemma4ReasoningParser(None)  # no ids, no override: the output decides
    p.start([1, 2])
    assert not p.in_reasoning


def test_honor_interrupts_ends_the_channel():
    assert run_reasoning(["thought\nplan <|tool_call>call:f{}<tool_call|>"], [OPEN_ID],
                         honor_interrupts=True) == ("plan", "<|tool_call>call:f{}<tool_call|>")


def test_custom_channel_names():
    assert run_reasoning(["analysis\nhm<channel|>ok"], [OPEN_ID], channels=("analysis",)) == ("hm", "ok")


# -- tool calls: the syntax -------------------------------------------------------------------

@pytest.mark.parametrize(("body", "expected"), [
    (f"call:get_weather{{city:{S}Paris{S},days:3}}", ("get_weather", {"city": "Paris", "days": 3})),
    ("call:f{}", ("f", {})),
    (f" call: ns.tool-x {{ a : {S}{{}}\", ,:\n'{S} , }}\n", ("ns.tool-x", {"a": "{}\", ,:\n'"})),
    ("call:f{n:-1.5e3,i:0,t:true,f:false,z:null,T:True,N:None}",
     ("f", {"n": -1500.0, "i": 0, "t": True, "f": False, "z": None, "T": True, "N": None})),
    (f"call:f{{o:{{p:[1,{S}a]{S},[],{{}}],q:{{}}}},e:[]}}", ("f", {"o": {"p": [1, "a]", [], {}], "q": {}}, "e": []})),
    ('call:f{"k":"json \\"q\\"",' + f"{S}sk{S}:1}}", ("f", {"k": 'json "q"', "sk": 1})),
    (f"call:f{{s:{S}{S},u:{S}ü → 😀{S}}}", ("f", {"s": "", "u": "ü → 😀"})),
])
def test_parse_call(body, expected):
    assert parse_call(body) == expected


@pytest.mark.parametrize("body", [
    "", "f{}", "call:{}", "call:f", "call:f{", "call:f{a:}", f"call:f{{a:{S}x}}", "call:f{a:1} extra",
    "call:f{a:bare}", "call:f{a 1}", "call:f{a:1 b:2}", "call:f{a:[1 2]}", "call:f{a:01}", "call:f{a:1.}",
    "call:f" + "{a:[" * 2000, 'call:f{a:"open}',
])
def test_parse_call_rejects_malformed(body):
    assert parse_call(body) is None


# -- tool calls: streaming --------------------------------------------------------------------

def run_tools(chunks) -> tuple[str, list[dict]]:
    p = Gemma4ToolParser(None, tools=[])
    content, deltas = "", []
    for c in chunks:
        text, calls = p.feed(c)
        content, deltas = content + text, deltas + calls
    text, calls = p.finish()
    content, deltas = content + text, deltas + calls
    out: list[dict] = []
    for d in deltas:  # OpenAI's phases: id + name first (no arguments), then argument pieces
        if d.name is not None:
            assert d.index == len(out) and d.id.startswith("call_") and d.arguments == ""
            out.append({"name": d.name, "arguments": ""})
        else:
            assert d.id is None and d.index == len(out) - 1
            out[d.index]["arguments"] += d.arguments
    assert p.num_calls == len(out)
    return content, [{"name": c["name"], "arguments": json.loads(c["arguments"])} for c in out]


TOOL_CASES = [
    pytest.param(f"Let me check. {START}call:get_weather{{city:{S}Paris, {{FR}}: \"x\"{S},days:3}}{END}\n"
                 f"{START}call:noop{{}}{END} Done.",
                 "Let me check.Done.",
                 [{"name": "get_weather", "arguments": {"city": 'Paris, {FR}: "x"', "days": 3}},
                  {"name": "noop", "arguments": {}}], id="two-calls-text-around"),
    pytest.param(f"{START}call:f{{a:{S}end tag {END} inside{S}}}{END}", "",
                 [{"name": "f", "arguments": {"a": f"end tag {END} inside"}}], id="end-tag-in-string"),
    pytest.param(f"{START}call:f{{q:{S}multi\nline{S},n:[1,{{x:null}}]}}", "",
                 [{"name": "f", "arguments": {"q": "multi\nline", "n": [1, {"x": None}]}}], id="no-end-tag"),
    pytest.param(f"x {START}call:f{{a:}}{END} y", f"x {START}call:f{{a:}}{END} y", [], id="malformed-mid"),
    pytest.param(f"ok {START}call:f{{a:1}}{END} {START}bad{END} z", f"ok{START}bad{END} z",
                 [{"name": "f", "arguments": {"a": 1}}], id="malformed-after-call"),
    pytest.param(f"x {START}call:f{{a:{S}abc", f"x {START}call:f{{a:{S}abc", [], id="unterminated-string"),
    pytest.param(f"x {START}call:f{{a:1", f"x {START}call:f{{a:1", [], id="unterminated-object"),
    pytest.param(f"x {START}", f"x {START}", [], id="bare-start"),
    pytest.param(f"a <|b {S} c <tool_call {END}", f"a <|b {S} c <tool_call {END}", [], id="stray-markup"),
    pytest.param(f"<|channel>thought\n{START}call:f{{}}{END}<channel|>then {START}call:g{{}}{END}",
                 f"<|channel>thought\n{START}call:f{{}}{END}<channel|>then",
                 [{"name": "g", "arguments": {}}], id="channel-left-inline"),
    pytest.param("  plain answer  ", "  plain answer  ", [], id="no-calls"),
    # regression (soak-and-fuzz suite): 1e400 parsed as inf and went out as the non-JSON `Infinity`
    pytest.param(f"x {START}call:f{{a:1e400}}{END}", f"x {START}call:f{{a:1e400}}{END}", [], id="number-out-of-range"),
]


@pytest.mark.parametrize(("text", "content", "calls"), TOOL_CASES)
def test_tool_calls_at_every_split(text, content, calls):
    for chunks in splits(text):
        assert run_tools(chunks) == (content, calls), chunks


def test_call_ids_are_distinct():
    p = Gemma4ToolParser()
    _, deltas = p.feed(f"{START}call:f{{}}{END}{START}call:f{{}}{END}")
    ids = [d.id for d in deltas if d.id]
    assert len(ids) == 2 and ids[0] != ids[1]


def test_long_call_streamed_char_by_char_is_linear():
    value = "x{\"},: " * 4000
    text = f"{START}call:f{{a:{S}{value}{S},b:2}}{END}"
    t0 = time.perf_counter()
    assert run_tools(list(text)) == ("", [{"name": "f", "arguments": {"a": value, "b": 2}}])
    assert time.perf_counter() - t0 < 2.0


def test_grammar_is_refused():
    with pytest.raises(ValueError, match="not supported"):
        Gemma4ToolParser().grammar([{"type": "function", "function": {"name": "f"}}], None, True, False)


# -- both, chained the way the server does ----------------------------------------------------

def chat(chunks, prompt) -> dict:
    from anna_core.server.choices import ChatChoice
    from anna_core.server.tools import ToolSetup

    tools = ToolSetup(tools=[{"type": "function", "function": {"name": "g"}}], choice="auto")
    tool_parser = Gemma4ToolParser(FakeTokenizer(), tools=tools.tools)
    reasoning = Gemma4ReasoningParser(FakeTokenizer())
    reasoning.start(prompt, (tool_parser.start_tag,))
    choice = ChatChoice(0, reasoning=reasoning, split_reasoning=True, tool_parser=tool_parser, tools=tools)
    for i, c in enumerate(chunks):
        choice.push(SimpleNamespace(delta_text=c, finished=i == len(chunks) - 1, logprobs=[]))
    return {"reasoning": choice.total.reasoning, "content": choice.total.content,
            "calls": [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in choice.calls]}


def test_chat_choice_chains_reasoning_then_calls():
    text = (f"thought\nI could call {START}call:g{{b:1}}{END} here.\n<channel|>\nSure. "
            f"{START}call:g{{b:{S}x}}{S}}}{END}")
    expected = {"reasoning": f"I could call {START}call:g{{b:1}}{END} here.", "content": "Sure.",
                "calls": [("g", {"b": "x}"})]}
    for chunks in splits(text):
        assert chat(chunks, [1, OPEN_ID]) == expected, chunks


def test_plugin_registers_lazily():
    from anna_core.parsers.loading import parser_factory
    from anna_core.plugins import output_parsers

    specs = {(s.kind, s.name): s.factory for s in output_parsers()}
    assert specs[("reasoning", "gemma4")] == "anna_gemma4.reasoning:Gemma4ReasoningParser"
    assert specs[("tool_call", "gemma4")] == "anna_gemma4.tool_calls:Gemma4ToolParser"
    assert parser_factory("reasoning", "gemma4") is Gemma4ReasoningParser
    assert parser_factory("tool_call", "gemma4") is Gemma4ToolParser
    code = "import sys, anna_gemma4.plugin; assert not {'anna_gemma4.reasoning', 'anna_gemma4.tool_calls', 'torch'} & set(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)
