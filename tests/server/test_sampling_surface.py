"""Structured output, logprobs, n / seed, logit_bias, stop strings and the completions forms,
through the official ``openai`` client against the scripted-model server."""

from __future__ import annotations

import json
import math

import httpx
import jsonschema
import openai
import pytest

from tests.server.scripted_server import API_KEY, MODEL

pytestmark = pytest.mark.slow

NO_THINK = {"chat_template_kwargs": {"enable_thinking": False}}
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                           "tags": {"type": "array", "items": {"type": "string"}}},
          "required": ["name", "age", "tags"], "additionalProperties": False}


def _chat(scripted, marker, **kw):
    extra = {**NO_THINK, **kw.pop("extra_body", {})}
    return scripted.client().chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": marker}], extra_body=extra, **kw)


@pytest.mark.parametrize("stream", [False, True])
def test_json_schema_output_validates_even_when_the_model_disagrees(scripted, stream):
    # The script wraps the JSON in prose and gives a string age: the grammar must fix both.
    marker = scripted.script("schema", 'Sure! {"name": "Ann", "age": "old", "tags": ["x"]} Bye.')
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}}
    r = _chat(scripted, marker, temperature=0, response_format=fmt, max_tokens=60, stream=stream)
    text = "".join(c.choices[0].delta.content or "" for c in r if c.choices) if stream else r.choices[0].message.content
    value = json.loads(text)
    jsonschema.validate(value, SCHEMA)
    assert isinstance(value["age"], int)
    free = _chat(scripted, marker, temperature=0, max_tokens=60)
    assert free.choices[0].message.content.startswith("Sure!")


def test_json_object_output_parses_after_thinking(scripted):
    marker = scripted.script("jobj", 'Thinking {not json}.\n</think>{"ok": true}')
    r = scripted.client().chat.completions.create(model=MODEL, messages=[{"role": "user", "content": marker}],
                                                  temperature=0, response_format={"type": "json_object"},
                                                  max_tokens=60)
    msg = r.choices[0].message
    assert msg.reasoning_content == "Thinking {not json}."  # the grammar starts after </think>
    assert json.loads(msg.content) == {"ok": True}


def test_bad_schema_is_a_400(scripted):
    with pytest.raises(openai.BadRequestError) as err:
        _chat(scripted, "x", response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {
            "type": "object", "properties": {"a": {"type": "integer", "minimum": 5, "maximum": 1}}}}})
    assert err.value.body["param"] == "response_format"


def _uniform(scripted, name="uni", length=6):
    words = [scripted.tokenizer.encode(w)[0] for w in (" red", " green", " blue", " cyan", " gold", " pink",
                                                         " gray", " teal")]
    return scripted.uniform(name, words, length), words


def test_chat_logprobs_and_top_logprobs_have_openai_shape_and_values(scripted):
    marker, _ = _uniform(scripted)
    r = _chat(scripted, marker, logprobs=True, top_logprobs=3, seed=1)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens == 7  # six words and EOS
    for entry in content[:6]:
        assert entry.logprob == pytest.approx(-math.log(8), abs=1e-5)
        assert bytes(entry.bytes).decode() == entry.token and entry.token.strip() in r.choices[0].message.content
        assert len(entry.top_logprobs) == 3
        assert all(t.logprob == pytest.approx(-math.log(8), abs=1e-5) for t in entry.top_logprobs)
    chunks = list(_chat(scripted, marker, logprobs=True, top_logprobs=3, seed=1, stream=True))
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [e.token for e in streamed] == [e.token for e in content]


def test_completion_logprobs_legacy_shape(scripted):
    marker, _ = _uniform(scripted)
    r = scripted.client().completions.create(model=MODEL, prompt=marker, logprobs=2, seed=5, max_tokens=6)
    lp = r.choices[0].logprobs
    assert "".join(lp.tokens) == r.choices[0].text
    assert lp.token_logprobs == pytest.approx([-math.log(8)] * 6, abs=1e-5)
    # the token itself and its two most likely alternatives (OpenAI: up to logprobs + 1 entries)
    assert all(2 <= len(t) <= 3 and t[tok] == lp_ for t, tok, lp_ in zip(lp.top_logprobs, lp.tokens,
                                                                            lp.token_logprobs))
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(6)]


def test_n_choices_with_a_seed_are_reproducible_and_distinct(scripted):
    marker, _ = _uniform(scripted, "uni_n", 8)
    first = _chat(scripted, marker, n=3, seed=1234)
    again = _chat(scripted, marker, n=3, seed=1234)
    other = _chat(scripted, marker, n=3, seed=99)
    texts = [c.message.content for c in first.choices]
    assert [c.index for c in first.choices] == [0, 1, 2]
    assert texts == [c.message.content for c in again.choices]
    assert len(set(texts)) == 3 and texts != [c.message.content for c in other.choices]
    alone = _chat(scripted, marker, seed=1234)  # choice 0 uses the seed itself, batched or not
    assert alone.choices[0].message.content == texts[0]
    chunks = list(_chat(scripted, marker, n=3, seed=1234, stream=True))
    streamed = ["".join(c.choices[0].delta.content or "" for c in chunks if c.choices and c.choices[0].index == i)
                for i in range(3)]
    assert streamed == texts


def test_seeds_equal_modulo_2_63_give_different_samples(scripted):
    """Seeds were reduced modulo 2**63 (0 and -2**63 sampled alike); now every int64 seed is its own, and choice
    seeds derived from one near the range's end stay in it."""
    marker, _ = _uniform(scripted, "uni_seed", 8)
    texts = {s: _chat(scripted, marker, seed=s).choices[0].message.content for s in (5, 5 - (1 << 63), -1,
                                                                                   (1 << 63) - 1)}
    assert texts[5] != texts[5 - (1 << 63)] and texts[-1] != texts[(1 << 63) - 1]
    edge = _chat(scripted, marker, n=3, seed=(1 << 63) - 1)
    assert edge.choices[0].message.content == texts[(1 << 63) - 1] and len({c.message.content for c in
                                                                              edge.choices}) == 3


def test_logit_bias_forces_and_bans_tokens(scripted):
    marker, words = _uniform(scripted, "uni_bias", 5)
    r = _chat(scripted, marker, seed=3, logit_bias={str(words[2]): 100})
    assert r.choices[0].message.content == " blue" * 5
    marker = scripted.script("bias2", "yes yes yes")
    yes = scripted.tokenizer.encode(" yes")[0]
    r = _chat(scripted, marker, temperature=0, logit_bias={str(yes): -100}, max_tokens=3)
    assert "yes" not in r.choices[0].message.content.replace("yes yes", "", 0)[3:]


@pytest.mark.parametrize("stop", ["STOP", "再见"])
def test_emoji_and_cjk_stream_whole_without_the_stop_text(scripted, stop):
    text = "你好,世界!🙂👍🏽 日本語のテキスト。再见 STOP tail"
    marker = scripted.script("cjk", text)
    chunks = list(_chat(scripted, marker, temperature=0, stop=[stop], stream=True))
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert all("\ufffd" not in p for p in pieces) and len(pieces) >= 2  # (a loaded machine coalesces deltas)
    assert "".join(pieces) == text[:text.index(stop)]
    plain = _chat(scripted, marker, temperature=0, stop=stop)
    assert plain.choices[0].message.content == text[:text.index(stop)] and plain.choices[0].finish_reason == "stop"


def test_completions_prompt_forms_echo_and_n(scripted):
    marker = scripted.script("comp", " and so on.")
    client = scripted.client()
    ids = scripted.tokenizer.encode(marker)
    r = client.completions.create(model=MODEL, prompt=[marker, ids], n=2, max_tokens=10, temperature=0)
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    assert {c.text for c in r.choices} == {" and so on."}
    assert r.usage.prompt_tokens == 2 * len(ids) and r.usage.completion_tokens == 4 * 5
    echo = client.completions.create(model=MODEL, prompt=marker, echo=True, max_tokens=10, temperature=0)
    assert echo.choices[0].text == marker + " and so on."
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model=MODEL, prompt=marker, suffix="end")
    assert err.value.body["param"] == "suffix"


def test_tokenize_and_detokenize(scripted):
    headers = {"Authorization": f"Bearer {API_KEY}"}
    r = httpx.post(f"{scripted.base_url}/tokenize", json={"prompt": "Hello, world!"}, headers=headers).json()
    assert r["tokens"] == [9419, 11, 1814, 0] and r["count"] == 4 and r["max_model_len"] == 2048
    back = httpx.post(f"{scripted.base_url}/detokenize", json={"tokens": r["tokens"]}, headers=headers).json()
    assert back == {"prompt": "Hello, world!"}


def test_known_but_unsupported_fields_are_400_naming_the_field(scripted):
    with pytest.raises(openai.BadRequestError) as err:
        _chat(scripted, "x", extra_body={"reasoning_effort": "high"})
    assert err.value.body["param"] == "reasoning_effort"


def test_models_retrieve_and_the_queue_limit_through_the_real_engine(scripted):
    client = scripted.client()
    model = client.models.retrieve(MODEL)
    assert model.id == MODEL and model.model_extra["max_model_len"] == 2048
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4o")
    config = scripted.llm.config  # the LLMEngine behind the server's AsyncEngine
    assert scripted.state.max_waiting_requests == 0
    config.max_waiting_requests = 2
    try:
        with pytest.raises(openai.BadRequestError) as err:
            client.completions.create(model=MODEL, prompt=[9419], n=3, max_tokens=1)
        assert err.value.body["param"] == "n" and "n is 3" in err.value.body["message"]
        assert "at most 2" in err.value.body["message"]
    finally:
        config.max_waiting_requests = 0
