"""The transcription form's fields: defaults, every refusal with its param, and the window text joiner."""

import pytest
from anna_audio.transcribe.request import parse_form
from anna_audio.transcribe.service import TextJoiner
from anna_core.errors import InvalidRequestError


def test_defaults():
    req = parse_form({"model": ["m"]}, b"RIFF")
    assert (req.audio, req.model, req.language, req.prompt, req.response_format, req.temperature, req.granularities,
            req.stream) == (b"RIFF", "m", None, None, "json", 0.0, (), False)


def test_fields():
    req = parse_form({"language": [" en "], "prompt": ["Anna, Kenobi"], "response_format": ["verbose_json"],
                      "temperature": ["0.5"], "timestamp_granularities[]": ["word", "segment", "word"],
                      "stream": ["false"], "mystery": ["1"]}, b"x")
    assert (req.language, req.prompt, req.response_format, req.temperature, req.granularities,
            req.unknown_fields) == ("en", "Anna, Kenobi", "verbose_json", 0.5, ("word", "segment"), ("mystery",))
    assert parse_form({"stream": ["true"], "response_format": ["text"]}, b"x").stream


@pytest.mark.parametrize(("form", "audio", "param", "message"), [
    ({}, None, "file", "no 'file' field"),
    ({"response_format": ["xml"]}, b"x", "response_format", "must be one of json, text, verbose_json, srt, vtt"),
    ({"temperature": ["2"]}, b"x", "temperature", "between 0 and 1"),
    ({"temperature": ["nan"]}, b"x", "temperature", "between 0 and 1"),
    ({"temperature": ["hot"]}, b"x", "temperature", "must be a number"),
    ({"timestamp_granularities[]": ["word"]}, b"x", "timestamp_granularities[]", "needs response_format 'verbose_json'"),
    ({"timestamp_granularities[]": ["char"], "response_format": ["verbose_json"]}, b"x", "timestamp_granularities[]",
     "must be one of word, segment"),
    ({"stream": ["true"], "response_format": ["srt"]}, b"x", "stream", "json or text"),
    ({"stream": ["maybe"]}, b"x", "stream", "true or false"),
    ({"model": ["a", "b"]}, b"x", "model", "sent 2 times"),
    ({"prompt": ["p" * 9000]}, b"x", "prompt", "longer than 8192"),
])
def test_refusals(form, audio, param, message):
    with pytest.raises(InvalidRequestError, match=message) as info:
        parse_form(form, audio)
    assert info.value.param == param


def test_joiner_spaces_and_cjk():
    joiner = TextJoiner()
    pieces = []
    for window in (["Hello", " there."], ["", "  General", " Kenobi"], ["你好"], ["世界"], ["!"]):
        joiner.next_window()
        pieces += [joiner.feed(p) for p in window]
    assert joiner.text == "".join(pieces) == "Hello there. General Kenobi 你好世界 !"


def test_a_granularity_sent_as_a_file_is_named_as_such():
    with pytest.raises(InvalidRequestError, match="must be a text field, not a file") as info:
        parse_form({"timestamp_granularities[]": [object()], "response_format": ["verbose_json"]}, b"x")
    assert info.value.param == "timestamp_granularities[]"
