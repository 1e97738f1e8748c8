"""A transcription as each OpenAI ``response_format`` writes it: ``json``, ``text``, ``verbose_json``, ``srt``,
``vtt``.

Times are seconds (floats) in :class:`Transcript`; SubRip writes them ``HH:MM:SS,mmm`` and WebVTT ``HH:MM:SS.mmm``,
rounded to the millisecond. ``verbose_json`` follows OpenAI's transcription object: ``task``, ``language`` (the
language's English name in lower case), ``duration`` (seconds of audio), ``text``, ``segments`` and, when word
timestamps were asked for, ``words``.
"""

from __future__ import annotations

import math
from typing import Any

import attrs

RESPONSE_FORMATS = ("json", "text", "verbose_json", "srt", "vtt")
"""The ``response_format`` values served."""

TEXT_FORMATS = {"text": "text/plain; charset=utf-8", "srt": "application/x-subrip; charset=utf-8",
                "vtt": "text/vtt; charset=utf-8"}
"""The formats sent as text (not JSON), with their content types."""


@attrs.frozen
class Segment:
    """A stretch of the transcript with its times.

    Attributes:
        start / end: seconds from the start of the audio, ``0 <= start <= end``.
        text: the words said in it.
    """

    start: float
    end: float
    text: str


@attrs.frozen
class Word:
    """One word with its times (seconds from the start of the audio)."""

    word: str
    start: float
    end: float


@attrs.frozen
class Transcript:
    """What a transcription produced.

    Attributes:
        text: the whole transcript.
        language: the language the model detected or was told (English name, e.g. ``"English"``), or None.
        duration_s: seconds of audio transcribed.
        segments: timed stretches in order (from the forced aligner, or one per audio window without it).
        words: word times in order (empty unless word timestamps were asked for).
    """

    text: str
    language: str | None
    duration_s: float
    segments: tuple[Segment, ...] = ()
    words: tuple[Word, ...] = ()


def _clock(seconds: float, decimal: str) -> str:
    """``HH:MM:SS<decimal>mmm`` of ``seconds`` (>= 0), rounded to the millisecond."""
    ms = max(0, round(seconds * 1000))
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{decimal}{ms:03d}"


def srt_time(seconds: float) -> str:
    """SubRip's ``HH:MM:SS,mmm`` (``3723.5`` -> ``"01:02:03,500"``)."""
    return _clock(seconds, ",")


def vtt_time(seconds: float) -> str:
    """WebVTT's ``HH:MM:SS.mmm`` (``3723.5`` -> ``"01:02:03.500"``)."""
    return _clock(seconds, ".")


def to_srt(segments: tuple[Segment, ...] | list[Segment]) -> str:
    """SubRip cues numbered from 1, each ``n``, ``start --> end`` and its text, separated by blank lines."""
    cues = [f"{i}\n{srt_time(s.start)} --> {srt_time(s.end)}\n{s.text.strip()}\n"
            for i, s in enumerate(segments, start=1)]
    return "\n".join(cues)


def to_vtt(segments: tuple[Segment, ...] | list[Segment]) -> str:
    """A WebVTT file: the ``WEBVTT`` header, then one ``start --> end`` cue per segment."""
    cues = [f"{vtt_time(s.start)} --> {vtt_time(s.end)}\n{s.text.strip()}\n" for s in segments]
    return "WEBVTT\n\n" + "\n".join(cues)


def usage(duration_s: float) -> dict[str, Any]:
    """OpenAI's duration-billed usage: whole seconds of audio, rounded up."""
    return {"type": "duration", "seconds": math.ceil(duration_s)}


def verbose_json(transcript: Transcript, *, temperature: float, with_words: bool) -> dict[str, Any]:
    """OpenAI's ``verbose_json`` transcription object.

    Segments carry OpenAI's fields; the ones Anna does not compute are neutral (``tokens`` empty, ``avg_logprob``,
    ``compression_ratio`` and ``no_speech_prob`` 0). ``seek`` is the segment's start in 10 ms frames.
    """
    body: dict[str, Any] = {
        "task": "transcribe",
        "language": (transcript.language or "").lower(),
        "duration": round(transcript.duration_s, 3),
        "text": transcript.text,
    }
    body["segments"] = [
        {"id": i, "seek": round(s.start * 100), "start": round(s.start, 3), "end": round(s.end, 3),
         "text": s.text, "tokens": [], "temperature": temperature, "avg_logprob": 0.0,
         "compression_ratio": 0.0, "no_speech_prob": 0.0}
        for i, s in enumerate(transcript.segments)]
    if with_words:
        body["words"] = [{"word": w.word, "start": round(w.start, 3), "end": round(w.end, 3)}
                         for w in transcript.words]
    body["usage"] = usage(transcript.duration_s)
    return body


def render(transcript: Transcript, response_format: str, *, temperature: float = 0.0,
           granularities: tuple[str, ...] = ()) -> dict[str, Any] | str:
    """The response body of ``response_format``: a dict for the JSON formats, a string for the text ones.

    Raises:
        ValueError: ``response_format`` is not one of :data:`RESPONSE_FORMATS`.
    """
    if response_format == "json":
        return {"text": transcript.text, "usage": usage(transcript.duration_s)}
    if response_format == "verbose_json":
        return verbose_json(transcript, temperature=temperature, with_words="word" in granularities)
    if response_format == "text":
        return transcript.text
    if response_format == "srt":
        return to_srt(transcript.segments)
    if response_format == "vtt":
        return to_vtt(transcript.segments)
    raise ValueError(f"unknown response_format {response_format!r}; use one of {', '.join(RESPONSE_FORMATS)}")
