"""The fields of a ``POST /v1/audio/transcriptions`` form, checked.

OpenAI's multipart fields: ``file`` (the upload), ``model``, ``language``, ``prompt``, ``response_format``,
``temperature``, ``timestamp_granularities[]`` and ``stream``. Every problem is an
:class:`~anna_core.errors.InvalidRequestError` (HTTP 400) whose ``param`` names the field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
from anna_core.errors import InvalidRequestError

from anna_audio.transcribe.formats import RESPONSE_FORMATS

GRANULARITIES = ("word", "segment")
"""``timestamp_granularities[]`` values."""
STREAM_FORMATS = ("json", "text")
"""The response formats a streamed transcription may ask for (the events carry text only)."""
KNOWN_FIELDS = frozenset(("file", "model", "language", "prompt", "response_format", "temperature",
                          "timestamp_granularities", "timestamp_granularities[]", "stream", "include[]", "include",
                          "chunking_strategy"))
"""Form fields read (or accepted and ignored: ``include[]``, ``chunking_strategy``); others are logged once."""
MAX_TEXT_FIELD_CHARS = 8192
"""Characters a text field (``prompt``, ``language``, ...) may hold."""


@attrs.frozen
class TranscriptionRequest:
    """A checked transcription request.

    Attributes:
        audio: the uploaded file's bytes (not yet decoded).
        model: the ``model`` field ("" when absent).
        language: the ``language`` field as sent (None: detect).
        prompt: context or hot words for the model (None: none).
        response_format: one of :data:`~anna_audio.transcribe.formats.RESPONSE_FORMATS`.
        temperature: sampling temperature in ``[0, 1]`` (0: greedy).
        granularities: ``timestamp_granularities[]`` values, in :data:`GRANULARITIES`.
        stream: send ``transcript.text.delta`` / ``transcript.text.done`` events.
        unknown_fields: form fields this route does not read.
    """

    audio: bytes
    model: str = ""
    language: str | None = None
    prompt: str | None = None
    response_format: str = "json"
    temperature: float = 0.0
    granularities: tuple[str, ...] = ()
    stream: bool = False
    unknown_fields: tuple[str, ...] = ()


def _one(form: Mapping[str, Sequence[Any]], name: str) -> Any:
    values = form.get(name) or []
    if len(values) > 1:
        raise InvalidRequestError(f"'{name}' was sent {len(values)} times; send it once", param=name)
    return values[0] if values else None


def _text(form: Mapping[str, Sequence[Any]], name: str) -> str | None:
    value = _one(form, name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidRequestError(f"'{name}' must be a text field, not a file", param=name)
    if len(value) > MAX_TEXT_FIELD_CHARS:
        raise InvalidRequestError(f"'{name}' is longer than {MAX_TEXT_FIELD_CHARS} characters", param=name)
    return value


def _bool(form: Mapping[str, Sequence[Any]], name: str) -> bool:
    value = _text(form, name)
    if value is None or value.strip().lower() in ("", "false", "0"):
        return False
    if value.strip().lower() in ("true", "1"):
        return True
    raise InvalidRequestError(f"'{name}' must be true or false, got {value!r}", param=name)


def _temperature(form: Mapping[str, Sequence[Any]]) -> float:
    value = _text(form, "temperature")
    if value is None or not value.strip():
        return 0.0
    try:
        t = float(value)
    except ValueError:
        raise InvalidRequestError(f"'temperature' must be a number, got {value!r}", param="temperature") from None
    if not (math.isfinite(t) and 0.0 <= t <= 1.0):
        raise InvalidRequestError(f"'temperature' must be between 0 and 1, got {value!r}", param="temperature")
    return t


def _granularities(form: Mapping[str, Sequence[Any]]) -> tuple[str, ...]:
    values = [*(form.get("timestamp_granularities[]") or []), *(form.get("timestamp_granularities") or [])]
    out: list[str] = []
    for value in values:
        if not isinstance(value, str):
            raise InvalidRequestError("'timestamp_granularities[]' must be a text field, not a file",
                                      param="timestamp_granularities[]")
        if value not in GRANULARITIES:
            raise InvalidRequestError(f"timestamp_granularities[] values must be one of {', '.join(GRANULARITIES)}, "
                                      f"got {value!r}", param="timestamp_granularities[]")
        if value not in out:
            out.append(value)
    return tuple(out)


def parse_form(form: Mapping[str, Sequence[Any]], audio: bytes | None) -> TranscriptionRequest:
    """Check a transcription form.

    Args:
        form: every field's values by name (files left out), as the multipart parser found them.
        audio: the ``file`` field's bytes, or None when the form has no file.

    Raises:
        InvalidRequestError: no ``file``; a field sent twice, too long or of the wrong kind; an unknown
            ``response_format`` or granularity; ``temperature`` outside ``[0, 1]``; timestamps asked without
            ``verbose_json``; ``stream`` with a format other than ``json`` / ``text``.
    """
    if audio is None:
        raise InvalidRequestError("the form has no 'file' field: send the audio as a file part named 'file'",
                                  param="file")
    response_format = (_text(form, "response_format") or "json").strip()
    if response_format not in RESPONSE_FORMATS:
        raise InvalidRequestError(f"response_format must be one of {', '.join(RESPONSE_FORMATS)}, got "
                                  f"{response_format!r}", param="response_format")
    granularities = _granularities(form)
    if granularities and response_format != "verbose_json":
        raise InvalidRequestError("timestamp_granularities[] needs response_format 'verbose_json'",
                                  param="timestamp_granularities[]")
    stream = _bool(form, "stream")
    if stream and response_format not in STREAM_FORMATS:
        raise InvalidRequestError(f"stream=true sends text events only: response_format must be json or text, "
                                  f"got {response_format!r}", param="stream")
    language = (_text(form, "language") or "").strip() or None
    prompt = _text(form, "prompt") or None
    return TranscriptionRequest(
        audio=audio, model=(_text(form, "model") or "").strip(), language=language, prompt=prompt,
        response_format=response_format, temperature=_temperature(form), granularities=granularities,
        stream=stream, unknown_fields=tuple(sorted(k for k in form if k not in KNOWN_FIELDS)))
