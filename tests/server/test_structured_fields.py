"""vLLM's constraint fields (``structured_outputs``, ``guided_json`` / ``guided_regex`` / ``guided_choice`` /
``guided_grammar``) on both completion routes, through the ``openai`` client against the scripted-model server: the
output follows the grammar even where the script disagrees; ``allowed_token_ids`` and ``truncate_prompt_tokens``
work as vLLM's; conflicting or unsupported fields, and vLLM's other output-changing extras Anna does not implement,
are 400s naming the field (they were dropped silently before)."""

from __future__ import annotations

import json
import re

import jsonschema
import openai
import pytest

from tests.server.scripted_server import MODEL

pytestmark = pytest.mark.slow

NO_THINK = {"chat_template_kwargs": {"enable_thinking": False}}
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6}, "ok": {"type": "boolean"}},
          "required": ["name", "ok"], "additionalProperties": False}
SCRIPT = 'The color is: Red. {"name": "Ann", "ok": "yes"} Call 555-1234 now.'


def _deep_items(depth):
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema}
    return schema


def _chat(scripted, **extra):
    marker = scripted.script("structured", SCRIPT)
    r = scripted.client().chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": marker}], temperature=0, max_tokens=60,
        extra_body={**NO_THINK, **extra})
    return r.choices[0].message.content


def _completion(scripted, **extra):
    marker = scripted.script("structured", SCRIPT)
    r = scripted.client().completions.create(model=MODEL, prompt=marker, temperature=0, max_tokens=60,
                                             extra_body=extra)
    return r.choices[0].text


def test_the_script_is_free_text_without_a_constraint(scripted):
    assert _chat(scripted).startswith("The color is")


@pytest.mark.parametrize("route", [_chat, _completion])
@pytest.mark.parametrize("spelling", ["guided", "structured_outputs"])
def test_choice_regex_json_and_grammar_constrain_the_output(scripted, route, spelling):
    def ask(kind, value):
        return route(scripted, **({f"guided_{kind}": value} if spelling == "guided"
                                  else {"structured_outputs": {kind: value}}))

    choices = ["red", 'say "blue"', "grün 🙂"]
    assert ask("choice", choices) in choices
    assert re.fullmatch(r"\d{3}-\d{4}", ask("regex", r"\d{3}-\d{4}"))
    for schema in (SCHEMA, json.dumps(SCHEMA)):  # an object, or JSON text (vLLM takes both)
        value = json.loads(ask("json", schema))
        jsonschema.validate(value, SCHEMA)
    assert ask("grammar", 'root ::= "yes" | "no" | "maybe"') in ("yes", "no", "maybe")


def test_structured_outputs_json_object(scripted):
    marker = scripted.script("jobj_so", '{"ok": true}')
    r = scripted.client().chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": marker}], temperature=0, max_tokens=40,
        extra_body={**NO_THINK, "structured_outputs": {"json_object": True}})
    assert json.loads(r.choices[0].message.content) == {"ok": True}


@pytest.mark.parametrize(("extra", "param", "message"), [
    ({"guided_choice": ["a"], "guided_regex": "a"}, "guided_choice", "set one output constraint"),
    ({"response_format": {"type": "json_object"}, "guided_json": SCHEMA}, "guided_json", "set one output constraint"),
    ({"structured_outputs": {"regex": "a", "choice": ["a"]}}, "structured_outputs", "exactly one of"),
    ({"structured_outputs": {"regexp": "a"}}, "structured_outputs", "unknown keys ['regexp']"),
    ({"structured_outputs": {"regex": "a", "whitespace_pattern": " "}}, "structured_outputs", "whitespace_pattern"),
    ({"structured_outputs": "a"}, "structured_outputs", "must be an object"),
    ({"guided_choice": []}, "guided_choice", "array of 1 to"),
    ({"guided_choice": ["a", 3]}, "guided_choice", "array of 1 to"),
    ({"guided_json": "{not json"}, "guided_json", "not valid JSON"),
    ({"guided_json": "[" * 100_000 + "]" * 100_000}, "guided_json", "nested too deeply"),
    ({"guided_json": '{"properties":' * 500 + "{}" + "}" * 500}, "guided_json", "nest 501 objects"),
    ({"guided_json": '{"type": "string", "enum": ["\\ud800"]}'}, "guided_json", "not valid Unicode"),
    ({"structured_outputs": {"json": '{"\\udc00": 1}'}}, "structured_outputs.json", "not valid Unicode"),
    ({"guided_regex": "a{" + "9" * 5000 + "}"}, "guided_regex", "unrolls to more than"),
    ({"structured_outputs": {"structural_tag": json.dumps({"type": "structural_tag", "format": {
        "type": "json_schema", "json_schema": _deep_items(300)}})}}, "structured_outputs.structural_tag",
     "objects / arrays deep"),
    ({"structured_outputs": {"structural_tag": json.dumps({"type": "structural_tag", "structures": [{"begin": "<f>"}],
                                                           "triggers": ["<f>"]})}},
     "structured_outputs.structural_tag", "{begin, schema, end}"),
    ({"structured_outputs": {"structural_tag": "[1]"}}, "structured_outputs.structural_tag", "a JSON object"),
    ({"structured_outputs": {"json_object": False, "choice": ["a"]}}, "structured_outputs", "exactly one of"),
    ({"structured_outputs": {"json_object": False}}, "structured_outputs.json_object", "must be true"),
    ({"structured_outputs": {"regex": 0}}, "structured_outputs.regex", "non-empty string"),
    ({"guided_regex": "(ab"}, "guided_regex", "cannot compile the regex"),
    ({"guided_regex": "a{5000}"}, "guided_regex", "unrolls to more than"),
    ({"guided_grammar": "root ::= undefined_rule"}, "guided_grammar", "cannot compile the grammar"),
    ({"guided_decoding_backend": "outlines", "guided_regex": "a"}, "guided_decoding_backend", "xgrammar"),
    ({"guided_whitespace_pattern": " ", "guided_regex": "a"}, "guided_whitespace_pattern", "not supported"),
    ({"allowed_token_ids": []}, "allowed_token_ids", "non-empty array"),
    ({"allowed_token_ids": [1, -2]}, "allowed_token_ids", "non-empty array"),
    ({"allowed_token_ids": [1, 10**7]}, "allowed_token_ids", "outside the vocabulary"),
    ({"truncate_prompt_tokens": 0}, "truncate_prompt_tokens", "-1 (the context length) or a positive count"),
    ({"truncate_prompt_tokens": -2}, "truncate_prompt_tokens", "must be at least -1"),
    ({"truncate_prompt_tokens": 4096}, "truncate_prompt_tokens", "larger than the model's context length (2048)"),
    ({"bad_words": ["Red", " "]}, "bad_words", "non-blank strings"),
    ({"bad_words": "Red"}, "bad_words", "must be an array"),
    ({"prompt_logprobs": 21}, "prompt_logprobs", "at most 20"),
    ({"use_beam_search": True}, "use_beam_search", "not supported"),
])
@pytest.mark.parametrize("route", [_chat, _completion])
def test_conflicting_bad_or_unimplemented_fields_are_400s_naming_the_field(scripted, route, extra, param, message):
    with pytest.raises(openai.BadRequestError) as err:
        route(scripted, **extra)
    assert err.value.body["param"] == param and message in err.value.body["message"], err.value.body


def test_neutral_values_of_the_unimplemented_extras_are_accepted(scripted):
    text = _chat(scripted, allowed_token_ids=None, bad_words=[], use_beam_search=False, guided_decoding_backend="xgrammar",
                 structured_outputs={"choice": ["red", "blue"], "disable_any_whitespace": True, "backend": "auto"})
    assert text in ("red", "blue")


def test_a_constraint_with_a_forced_tool_choice_is_a_400(scripted):
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    with pytest.raises(openai.BadRequestError) as err:
        _chat(scripted, tools=[tool], tool_choice="required", guided_choice=["a"])
    assert err.value.body["param"] == "guided_choice"


@pytest.mark.parametrize("route", [_chat, _completion])
def test_allowed_token_ids_restrict_every_sampled_token(scripted, route):
    """vLLM's ``allowed_token_ids``: every other token's logit is -inf, EOS included (so the output runs to
    max_tokens), greedy and sampled alike."""
    words = (" red", " blue", " green")
    allowed = [scripted.tokenizer.encode(w)[0] for w in words]
    assert all(len(scripted.tokenizer.encode(w)) == 1 for w in words)
    for temperature in (0, 1):
        text = route(scripted, allowed_token_ids=allowed, temperature=temperature, seed=7)
        assert re.fullmatch("( red| blue| green){60}", text), text
    assert route(scripted).startswith("The color is")  # unconstrained without it


def test_truncate_prompt_tokens_keeps_the_last_tokens(scripted):
    marker = scripted.script("truncated", "Done.")
    prompt = " filler" * 300 + " " + marker
    whole = len(scripted.tokenizer.encode(prompt))
    client = scripted.client()
    full = client.completions.create(model=MODEL, prompt=prompt, max_tokens=8, temperature=0)
    assert full.usage.prompt_tokens == whole and full.choices[0].text == "Done."
    cut = client.completions.create(model=MODEL, prompt=prompt, max_tokens=8, temperature=0, echo=True,
                                    extra_body={"truncate_prompt_tokens": 40})
    assert cut.usage.prompt_tokens == 40  # the marker is at the end: the script still answers
    kept = scripted.tokenizer.decode(scripted.tokenizer.encode(prompt)[-40:])
    assert cut.choices[0].text == kept + "Done."  # echo shows what was kept
    same = client.completions.create(model=MODEL, prompt=prompt, max_tokens=8, temperature=0,
                                     extra_body={"truncate_prompt_tokens": -1})  # the context length: nothing cut
    assert same.usage.prompt_tokens == whole
    chat = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": prompt}], max_tokens=8,
                                          temperature=0, extra_body={**NO_THINK, "truncate_prompt_tokens": 50})
    assert chat.usage.prompt_tokens == 50
    too_long = " filler" * 2100
    with pytest.raises(openai.BadRequestError) as err:  # without truncation: over the context
        client.completions.create(model=MODEL, prompt=too_long, max_tokens=8)
    assert err.value.body["code"] == "context_length_exceeded"
    ok = client.completions.create(model=MODEL, prompt=too_long, max_tokens=8,
                                   extra_body={"truncate_prompt_tokens": 1000})
    assert ok.usage.prompt_tokens == 1000
    huge = " filler" * 6000 + " " + marker  # 42k characters: past the 16-per-context-token refusal (32,768)
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model=MODEL, prompt=huge, max_tokens=8)
    assert err.value.body["code"] == "context_length_exceeded"
    for route in ("completions", "chat"):  # with truncation its tail is tokenized: the last 50 tokens kept
        if route == "completions":
            cut = client.completions.create(model=MODEL, prompt=huge, max_tokens=8, temperature=0,
                                            extra_body={"truncate_prompt_tokens": 50})
            assert cut.choices[0].text == "Done."
        else:
            cut = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": huge}],
                                                 max_tokens=8, temperature=0,
                                                 extra_body={**NO_THINK, "truncate_prompt_tokens": 50})
        assert cut.usage.prompt_tokens == 50


@pytest.mark.parametrize("route", [_chat, _completion])
def test_bad_words_are_never_completed(scripted, route):
    """vLLM's ``bad_words``: the token that would complete a word (bare, or as a word of its own after a space) is
    banned; a one-token word anywhere, a two-token word only after its first token."""
    free = route(scripted)
    assert "Red" in free and "color is" in free
    text = route(scripted, bad_words=["Red", "color is"])
    assert "Red" not in text and "color is" not in text and text.startswith("The color")


def test_bad_word_ids_read_words_as_vllm_does(scripted):
    from anna_core.engine.logits_processors import LogitsProcessors
    from anna_core.engine.sampling_params import SamplingParams

    tok = scripted.tokenizer
    procs = LogitsProcessors(tok, None, ())
    ids = procs.bad_word_ids(SamplingParams(bad_words=["Red", "  color is"]))
    assert ids == (tuple(tok.encode("Red")), tuple(tok.encode(" Red")), tuple(tok.encode("color is")),
                   tuple(tok.encode(" color is")))
    assert procs.bad_word_ids(SamplingParams()) == ()


def test_a_lark_grammar_and_vllms_older_structural_tag_are_read_as_vllm_reads_them(scripted):
    assert _chat(scripted, guided_grammar='start: "yes" | "no"') in ("yes", "no")  # no "::=": Lark
    tag = {"type": "structural_tag", "structures": [{"begin": "<f>", "schema": {"type": "object"}, "end": "</f>"}],
           "triggers": ["<f>"]}
    assert isinstance(_chat(scripted, structured_outputs={"structural_tag": json.dumps(tag)}), str)


def test_a_huge_fps_is_a_400_not_a_500():
    """``math.isfinite(10**400)`` raised OverflowError inside the video options check."""
    import types

    from anna_core.errors import InvalidRequestError
    from anna_core.server import prepare

    server = types.SimpleNamespace(processor=types.SimpleNamespace(video_sampling=(2.0, 32)))
    for fps in (10**400, float("inf"), 0, -1, True):
        with pytest.raises(InvalidRequestError, match="mm_processor_kwargs.fps must be a positive number"):
            prepare._decode_video(b"", server, {"fps": fps})



def test_echo_with_logprobs_returns_the_prompts_logprobs_as_lm_eval_reads_them(scripted):
    """lm-evaluation-harness's ``local-completions`` loglikelihood request: token-id prompt, ``echo``, ``logprobs``
    1, ``max_tokens`` 1: one logprobs entry per prompt token (the first null) and one for the generated token; the
    values agree with vLLM's ``prompt_logprobs`` of the same request, streamed or not."""
    marker = scripted.script("echo_lp", "Done.")
    prompt = scripted.tokenizer.encode("The sky is blue " + marker)
    client = scripted.client()
    r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=1, temperature=0, echo=True, logprobs=1,
                                  extra_body={"prompt_logprobs": 2})
    lp, choice = r.choices[0].logprobs, r.choices[0]
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(prompt) + 1
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert all(isinstance(x, float) and x <= 0 for x in lp.token_logprobs[1:]), lp.token_logprobs
    assert all(1 <= len(t) <= 2 and t[tok] == x for t, tok, x in zip(lp.top_logprobs[1:], lp.tokens[1:],
                                                                        lp.token_logprobs[1:]))  # itself + the best
    assert lp.text_offset == sorted(lp.text_offset) and lp.text_offset[0] == 0
    assert "".join(lp.tokens[:len(prompt)]) == scripted.tokenizer.decode(prompt)
    vllm = choice.model_extra["prompt_logprobs"]
    assert vllm[0] is None and len(vllm) == len(prompt)
    for pos in range(1, len(prompt)):
        row = vllm[pos]
        mine = row[str(prompt[pos])]
        assert mine["logprob"] == pytest.approx(lp.token_logprobs[pos]) and mine["rank"] >= 1
        assert len(row) in (2, 3)  # the token and its two best alternatives (it may be one of them)
        ranks = sorted(v["rank"] for k, v in row.items() if k != str(prompt[pos]))
        assert ranks == [1, 2]
    chunks = list(client.completions.create(model=MODEL, prompt=prompt, max_tokens=1, temperature=0, echo=True,
                                            logprobs=1, stream=True))
    streamed = [t for c in chunks if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.token_logprobs]
    assert streamed == lp.token_logprobs
    plain = client.completions.create(model=MODEL, prompt=prompt, max_tokens=1, temperature=0, logprobs=1)
    assert len(plain.choices[0].logprobs.tokens) == 1 and "prompt_logprobs" not in (plain.choices[0].model_extra or {})


def test_chat_prompt_logprobs(scripted):
    marker = scripted.script("chat_plp", "Done.")
    client = scripted.client()
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": marker}], max_tokens=2,
                                       temperature=0, extra_body={**NO_THINK, "prompt_logprobs": 0})
    plp = r.model_extra["prompt_logprobs"]
    assert plp[0] is None and len(plp) == r.usage.prompt_tokens
    assert all(len(row) == 1 and next(iter(row.values()))["logprob"] <= 0 for row in plp[1:])
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": marker}], max_tokens=2,
                                       stream=True, extra_body={"prompt_logprobs": 0})
    assert err.value.body["param"] == "prompt_logprobs"


def test_a_row_whose_allowed_tokens_are_all_bad_words_still_samples_among_them(scripted):
    """Bad words are banned with a finite lowest logit (as vLLM), so allowed_token_ids still wins: the banned but
    only allowed token, never an id outside the set (an all -inf row fell to token 0, "!")."""
    red = scripted.tokenizer.encode(" red")[0]
    text = _chat(scripted, allowed_token_ids=[red], bad_words=["red"])
    assert re.fullmatch("( red){60}", text), text


def test_echo_with_max_tokens_zero_scores_the_prompt_alone(scripted):
    """OpenAI's (and vLLM's) way to score a prompt: ``echo`` with ``max_tokens`` 0 answers the prompt's text and
    logprobs and nothing generated (usage counts no completion tokens); without ``echo`` 0 stays a 400."""
    marker = scripted.script("echo0", "Done.")
    prompt_text = "The sky is blue " + marker
    prompt = scripted.tokenizer.encode(prompt_text)
    client = scripted.client()
    for given in (prompt, prompt_text):
        r = client.completions.create(model=MODEL, prompt=given, max_tokens=0, echo=True, logprobs=1, temperature=0)
        c = r.choices[0]
        assert c.text == prompt_text and c.finish_reason == "length"
        assert len(c.logprobs.tokens) == len(prompt) and c.logprobs.token_logprobs[0] is None
        assert r.usage.completion_tokens == 0 and r.usage.prompt_tokens == len(prompt)
    chunks = list(client.completions.create(model=MODEL, prompt=prompt, max_tokens=0, echo=True, logprobs=1,
                                            temperature=0, stream=True))
    assert "".join(ch.choices[0].text for ch in chunks if ch.choices) == prompt_text
    unscripted = scripted.tokenizer.encode("no marker here")  # the scripted model answers EOS at once: "stop"...
    for stream in (False, True):  # ...but a prompt scored alone ends as OpenAI says: "length"
        got = client.completions.create(model=MODEL, prompt=unscripted, max_tokens=0, echo=True, logprobs=1,
                                        stream=stream)
        reasons = [c.choices[0].finish_reason for c in (got if stream else [got]) if c.choices
                   and c.choices[0].finish_reason]
        assert reasons == ["length"], reasons
    streamed = [t for ch in chunks if ch.choices and ch.choices[0].logprobs for t in ch.choices[0].logprobs.tokens]
    assert len(streamed) == len(prompt)
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model=MODEL, prompt=prompt, max_tokens=0)
    assert err.value.body["param"] == "max_tokens"
