"""The Qwen3-ASR prompt and output protocol (:mod:`anna_audio.qwen3_asr.prompt`): the prompt against transformers'
``apply_transcription_request``, parsing whole answers, the stream that never lets the ``language X<asr_text>``
prefix through (every cut of every sample), languages and the audio window bound."""

from __future__ import annotations

import itertools
import random

import pytest
from anna_audio.qwen3_asr.prompt import (
    DEFAULT_LANGUAGES,
    MAX_AUDIO_WINDOW_S,
    AsrTextStream,
    build_transcription_prompt,
    max_window_seconds,
    normalize_language,
    parse_asr_output,
    supported_languages,
)

from tests.qwen3_asr.conftest import clip, load_anna

SAMPLES = [
    # (answer, forced, language, transcript)
    ("language English<asr_text>Hello, world.", False, "English", "Hello, world."),
    ("language Chinese<asr_text> 你好，世界。 ", False, "Chinese", "你好，世界。"),
    ("language None<asr_text>", False, None, ""),
    ("language English\n<asr_text>Two  spaces\nand a line.\n", False, "English", "Two  spaces\nand a line."),
    ("Language German<asr_text>Guten Tag", False, "German", "Guten Tag"),
    ("language\nJapanese\n<asr_text>こんにちは", False, "Japanese", "こんにちは"),
    ("Hello without a prefix", False, None, "Hello without a prefix"),
    ("la la land", False, None, "la la land"),
    ("language", False, None, "language"),
    ("languages of the world are many <3", False, None, "languages of the world are many <3"),
    ("language English is what I speak <b>", False, None, "language English is what I speak <b>"),
    ("  Forced text, 123 <asr_text> kept.  ", True, None, "Forced text, 123  kept."),  # a stray tag is never text
    ("hello world this is a transcript<asr_text> and the rest", False, None,
     "hello world this is a transcript and the rest"),  # no language before the tag: all transcript, tag dropped
    ("language English<asr_text>Hi <asr_text>there <asr_te", False, "English", "Hi there <asr_te"),
    ("Language models transcribe.", True, None, "Language models transcribe."),
]


def streamed(answer: str, cuts: list[int], forced: bool) -> tuple[list[str], AsrTextStream]:
    stream = AsrTextStream(language_forced=forced)
    bounds = [0, *cuts, len(answer)]
    out = [stream.feed(answer[a:b]) for a, b in itertools.pairwise(bounds)]
    return out + [stream.finish()], stream


@pytest.mark.parametrize("answer,forced,language,transcript", SAMPLES)
def test_parse_and_every_stream_split_agree(answer, forced, language, transcript):
    assert parse_asr_output(answer, language_forced=forced) == (language, transcript)
    rng = random.Random(0)
    splits = [[i] for i in range(1, len(answer))] + [list(range(1, len(answer)))]
    splits += [sorted(rng.sample(range(1, len(answer)), min(len(answer) - 1, 5))) for _ in range(20)]
    for cuts in splits:
        pieces, stream = streamed(answer, cuts, forced)
        assert "".join(pieces) == transcript, (cuts, pieces)
        assert stream.language == (None if forced else language)
        if "<asr_text>" in answer and not forced:
            assert not any("<asr_text>" in p or "language" in p.lower() for p in pieces), pieces


def test_parse_takes_a_bare_name_before_the_tag():
    assert parse_asr_output("English<asr_text>A bare name.") == ("English", "A bare name.")
    assert parse_asr_output(" none <asr_text>") == (None, "")
    assert parse_asr_output("language English<asr_text>") == ("English", "")
    # a word that names no language is transcript: the reference's split would drop "Hello"
    assert parse_asr_output("Hello<asr_text> world") == (None, "Hello world")


# Pieces of answers a sampled or random-weight model may write: prefixes whole and cut, bare names and words that
# begin one ("Hi": "Hindi"), tags whole, cut and nested, control tokens whole and cut, odd whitespace and case.
FUZZ_PIECES = ["language ", "Language", "lang", "uage", " ", "\n", "\u00a0", "English", "Eng", "lish", "Hi", "ndi",
               "Hindi", "None", "none", "Hello", " world", "x", "\u0130", "\u017f", "a" * 20, "Czech",
               "<asr_text>", "<as", "r_text>", "<asr", "_text>", "<", ">", "<think>", "<thi", "nk>", "<|im_end|>"]


def test_whole_and_streamed_transcripts_agree_for_random_answers_and_splits():
    """The stream's contract as a property: for seeded random answers cut at random places, the concatenated
    deltas equal :func:`parse_asr_output`'s transcript, and the languages agree."""
    rng = random.Random(2026)
    for _ in range(4000):
        answer = "".join(rng.choice(FUZZ_PIECES) for _ in range(rng.randint(0, 9)))
        forced = rng.random() < 0.2
        language, whole = parse_asr_output(answer, language_forced=forced, control=CONTROL)
        cuts = sorted(rng.sample(range(len(answer) + 1), rng.randint(0, min(len(answer), 8))))
        stream = AsrTextStream(language_forced=forced, control=CONTROL)
        bounds = [0, *cuts, len(answer)]
        out = "".join(stream.feed(answer[a:b]) for a, b in itertools.pairwise(bounds)) + stream.finish()
        assert (out, stream.language) == (whole, language), (answer, forced, cuts)


def test_the_prefix_is_held_until_the_tag_and_text_flows_after_it():
    stream = AsrTextStream()
    assert [stream.feed(d) for d in ["lang", "uage Eng", "lish<as", "r_text>He", "llo ", " ", "world", "  "]] == \
        ["", "", "", "He", "llo", "", "  world", ""]
    assert stream.language == "English" and stream.finish() == ""
    plain = AsrTextStream()
    assert plain.feed("Yes") == "Yes" and plain.feed(" there") == " there"  # no prefix can begin so: nothing held
    held = AsrTextStream()  # "Hi" may begin "Hindi" (a bare name), "Hi " may not
    assert held.feed("Hi") == "" and held.feed(" there") == "Hi there"


@pytest.mark.parametrize("language,context", [(None, None), ("English", None), ("Chinese", "Hotwords: 通义, Anna."),
                                              (None, "A previous sentence.")])
def test_the_prompt_equals_hf_apply_transcription_request(tiny_asr, hf_processor, language, context):
    loaded = load_anna(tiny_asr)
    ids = build_transcription_prompt(loaded.tokenizer, language=language, context=context)
    audio_id = loaded.processor.audio_token_id
    assert ids.count(audio_id) == 1
    audio = clip(440.0, 1.0, 0)
    expanded, _ = loaded.processor.process(ids, {"audio": [audio]})
    ref = hf_processor.apply_transcription_request(audio=audio, language=language, prompt=context)
    assert expanded == ref["input_ids"][0].tolist()
    text = loaded.tokenizer.decode(ids, skip_special_tokens=False)
    assert text.endswith("<|im_start|>assistant\n" + ("" if language is None else f"language {language}<asr_text>"))
    assert f"<|im_start|>system\n{context or ''}<|im_end|>" in text
    with pytest.raises(ValueError, match="plain name"):
        build_transcription_prompt(loaded.tokenizer, language="English<asr_text>", context=None)


def test_languages():
    assert supported_languages({"support_languages": ["English", "Chinese"]}) == ["English", "Chinese"]
    assert supported_languages({"audio_config": {}}) == list(DEFAULT_LANGUAGES) and len(DEFAULT_LANGUAGES) == 30
    langs = supported_languages({})
    assert normalize_language("english", langs) == "English"
    assert normalize_language(" en ", langs) == "English"
    assert normalize_language("yue", langs) == "Cantonese"
    assert normalize_language("ZH", langs) == "Chinese"
    with pytest.raises(ValueError, match="unsupported language 'Klingon'.*English, Cantonese"):
        normalize_language("Klingon", langs)
    with pytest.raises(ValueError, match="unsupported language 'fr'"):
        normalize_language("fr", ["English"])


def test_the_audio_window():
    assert MAX_AUDIO_WINDOW_S == 1200.0
    assert max_window_seconds(65536) == 1200.0
    assert max_window_seconds(4096, reserved_tokens=196) == 300.0  # 3900 placeholders: 13 a second
    with pytest.raises(ValueError, match="no room"):
        max_window_seconds(100, reserved_tokens=90)


CONTROL = ("<think>", "</think>", "<|im_end|>", "<tool_call>")
CONTROL_SAMPLES = [
    # (answer, forced, language, transcript): control tokens anywhere, even inside the prefix, are dropped
    ("<think></think>language English<asr_text>Hel<think>lo<|im_end|>", False, "English", "Hello"),
    ("language <think>German<asr_text>Guten</think> Tag", False, "German", "Guten Tag"),
    ("<tool_call>Plain text <thi without a token<|im_end|>", False, None, "Plain text <thi without a token"),
    ("<thi<think>nk>forced", True, None, "<think>forced"),  # spelt by the text around a removed token: text
    ("<think>", True, None, ""),
]


@pytest.mark.parametrize("answer,forced,language,transcript", CONTROL_SAMPLES)
def test_control_tokens_are_dropped_whole_and_streamed(answer, forced, language, transcript):
    assert parse_asr_output(answer, language_forced=forced, control=CONTROL) == (language, transcript)
    for cuts in [[i] for i in range(1, len(answer))] + [list(range(1, len(answer)))]:
        stream = AsrTextStream(language_forced=forced, control=CONTROL)
        bounds = [0, *cuts, len(answer)]
        pieces = [stream.feed(answer[a:b]) for a, b in itertools.pairwise(bounds)] + [stream.finish()]
        assert "".join(pieces) == transcript, (cuts, pieces)
        assert stream.language == (None if forced else language)


def test_control_tokens_of_a_checkpoint(tiny_asr):
    from anna_audio.qwen3_asr.prompt import control_tokens

    tokens = control_tokens(load_anna(tiny_asr).tokenizer)
    assert {"<think>", "</think>", "<|im_start|>", "<|im_end|>", "<|audio_pad|>"} <= set(tokens)
    assert "<asr_text>" not in tokens
    assert control_tokens(None) == ()  # a shape-only folder (the benchmark's) has no tokenizer


def test_the_control_filter_agrees_with_the_whole_text_however_it_is_cut():
    from anna_audio.qwen3_asr.prompt import ControlTokenFilter

    rng = random.Random(1)
    atoms = ["<", "th", "ink>", "<think>", "</think>", "</", "<|im_end|>", "<|im", "_end|>", "a", " "]
    for _ in range(300):
        text = "".join(rng.choice(atoms) for _ in range(rng.randint(0, 12)))
        whole = parse_asr_output(text, language_forced=True, control=CONTROL)[1]
        cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(0, 6)))) if len(text) > 1 else []
        control = ControlTokenFilter(CONTROL)
        bounds = [0, *cuts, len(text)]
        out = "".join(control.feed(text[a:b]) for a, b in itertools.pairwise(bounds)) + control.finish()
        assert out.strip() == whole, (text, cuts)
