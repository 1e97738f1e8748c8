"""Response formats of a transcription: SubRip / WebVTT times to the millisecond, OpenAI's JSON shapes."""

import pytest
from anna_audio.transcribe.formats import (
    Segment,
    Transcript,
    Word,
    render,
    srt_time,
    to_srt,
    to_vtt,
    vtt_time,
)


@pytest.mark.parametrize(("seconds", "srt", "vtt"), [
    (0.0, "00:00:00,000", "00:00:00.000"),
    (0.0004, "00:00:00,000", "00:00:00.000"),
    (0.0006, "00:00:00,001", "00:00:00.001"),
    (1.5, "00:00:01,500", "00:00:01.500"),
    (59.9995, "00:01:00,000", "00:01:00.000"),  # rounding carries into the minutes
    (3723.456, "01:02:03,456", "01:02:03.456"),
    (36000.0, "10:00:00,000", "10:00:00.000"),
    (360000.25, "100:00:00,250", "100:00:00.250"),
    (-0.2, "00:00:00,000", "00:00:00.000"),
])
def test_clock_formats(seconds, srt, vtt):
    assert srt_time(seconds) == srt
    assert vtt_time(seconds) == vtt


SEGMENTS = (Segment(0.0, 2.5, " Hello there."), Segment(2.5, 61.25, "General Kenobi!"))
TRANSCRIPT = Transcript(text="Hello there. General Kenobi!", language="English", duration_s=61.3,
                        segments=SEGMENTS, words=(Word("Hello", 0.1, 0.4), Word("there", 0.5, 0.9)))


def test_srt_document():
    assert to_srt(SEGMENTS) == ("1\n00:00:00,000 --> 00:00:02,500\nHello there.\n\n"
                                "2\n00:00:02,500 --> 00:01:01,250\nGeneral Kenobi!\n")
    assert render(TRANSCRIPT, "srt") == to_srt(SEGMENTS)


def test_vtt_document():
    assert to_vtt(SEGMENTS) == ("WEBVTT\n\n00:00:00.000 --> 00:00:02.500\nHello there.\n\n"
                                "00:00:02.500 --> 00:01:01.250\nGeneral Kenobi!\n")
    assert to_vtt(()) == "WEBVTT\n\n"


def test_json_and_text():
    assert render(TRANSCRIPT, "json") == {"text": TRANSCRIPT.text, "usage": {"type": "duration", "seconds": 62}}
    assert render(TRANSCRIPT, "text") == TRANSCRIPT.text


def test_verbose_json():
    body = render(TRANSCRIPT, "verbose_json", temperature=0.0)
    assert body["task"] == "transcribe" and body["language"] == "english" and body["duration"] == 61.3
    assert body["text"] == TRANSCRIPT.text and "words" not in body
    assert [(s["id"], s["start"], s["end"], s["text"], s["seek"]) for s in body["segments"]] == [
        (0, 0.0, 2.5, " Hello there.", 0), (1, 2.5, 61.25, "General Kenobi!", 250)]
    words = render(TRANSCRIPT, "verbose_json", granularities=("word",))["words"]
    assert words == [{"word": "Hello", "start": 0.1, "end": 0.4}, {"word": "there", "start": 0.5, "end": 0.9}]


def test_unknown_format():
    with pytest.raises(ValueError, match="unknown response_format 'xml'"):
        render(TRANSCRIPT, "xml")
