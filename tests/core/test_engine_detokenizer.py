"""Incremental detokenization (byte-level BPE) and stop strings across token boundaries."""

import pytest
from anna_core.engine.detokenizer import IncrementalDetokenizer
from anna_core.engine.sampling_params import SamplingParams
from anna_core.engine.stop_checker import StopStringChecker

from ._engine_fakes import build_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


@pytest.mark.parametrize("text", ["Hello 👋 world, 世界!", "🦀🦀 fox", "The end. 日本語のテキスト", "é ü ß"])
def test_streamed_text_equals_full_decode_and_never_has_partial_chars(tok, text):
    ids = tok.encode(text)
    assert len(ids) > len(text.split())  # multi-byte characters really are split over tokens
    detok = IncrementalDetokenizer(tok, prompt_token_ids=tok.encode("Hello"))
    deltas = [detok.push([i]) for i in ids]
    assert all("\ufffd" not in d for d in deltas)
    assert "".join(deltas) + detok.flush() == text
    assert detok.text == text
    assert "" in deltas  # some steps had to hold bytes back


def test_emoji_comes_out_whole_on_its_last_byte(tok):
    ids = tok.encode("a👋")
    detok = IncrementalDetokenizer(tok, [])
    deltas = [detok.push([i]) for i in ids]
    assert deltas[0] == "a" and deltas[1:-1] == [""] * (len(ids) - 2) and deltas[-1] == "👋"


def test_flush_releases_an_incomplete_tail_as_replacement(tok):
    ids = tok.encode("x👋")[:-1]  # the emoji's last byte never comes
    detok = IncrementalDetokenizer(tok, [])
    assert "".join(detok.push([i]) for i in ids) == "x"
    assert detok.flush() == "\ufffd"


def test_skip_special_tokens(tok):
    eos = tok.eos_token_id
    ids = tok.encode("Hello") + [eos] + tok.encode(" world")
    skip = IncrementalDetokenizer(tok, [], skip_special_tokens=True)
    keep = IncrementalDetokenizer(tok, [], skip_special_tokens=False)
    assert "".join(skip.push([i]) for i in ids) == "Hello world"
    assert "".join(keep.push([i]) for i in ids) == "Hello<|endoftext|> world"


def feed_all(checker, pieces):
    out, stop = [], None
    for n, piece in enumerate(pieces, 1):
        text, stop = checker.feed(piece, n)
        out.append(text)
        if stop is not None:
            break
    return out, stop


def test_stop_string_across_token_boundaries_is_not_leaked():
    checker = StopStringChecker(SamplingParams(stop=["STOP"]))
    out, stop = feed_all(checker, ["Hello S", "T", "OP and more"])
    assert stop == "STOP"
    assert out == ["Hello ", "", ""]  # "S" and "ST" are held back, then dropped


def test_held_back_text_is_released_when_it_is_not_a_stop():
    checker = StopStringChecker(SamplingParams(stop=["STOP"]))
    out, stop = feed_all(checker, ["a S", "T", "x"])
    assert stop is None and out == ["a ", "", "STx"]
    checker = StopStringChecker(SamplingParams(stop=["STOP"]))
    assert checker.feed("tail ST", 1) == ("tail ", None)
    assert checker.flush() == "ST"


def test_include_stop_str_and_earliest_match_wins():
    checker = StopStringChecker(SamplingParams(stop=["world", "lo w"], include_stop_str_in_output=True))
    assert checker.feed("hello world!", 1) == ("hello w", "lo w")
    checker = StopStringChecker(SamplingParams(stop=["\n\n"]))
    assert feed_all(checker, ["line\n", "\nnext"]) == (["line", ""], "\n\n")


def test_stop_strings_wait_for_min_tokens():
    checker = StopStringChecker(SamplingParams(stop=["x"], min_tokens=2))
    assert checker.feed("ax", 1) == ("ax", None)
    assert checker.feed("bxc", 3) == ("b", "x")
