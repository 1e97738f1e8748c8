"""The JSON body of ``POST /v1/audio/speech`` (OpenAI's speech request, plus Anna's ``language``, ``max_frames`` and
``ignore_eos``), checked field by field."""

from __future__ import annotations

import base64
import binascii
from typing import Any

import attrs
from anna_core.errors import InvalidRequestError

from anna_audio.qwen3_tts.voice import VoiceRequest
from anna_audio.speech.audio_out import check_format

STREAM_FORMATS = ("audio", "sse")
KNOWN = {"model", "input", "voice", "instructions", "response_format", "speed", "stream_format", "language",
         "max_frames", "ignore_eos", "ref_audio", "ref_text"}


@attrs.frozen
class SpeechBody:
    """A checked request: ``voice`` (the words and voice), ``response_format``, ``stream_format``, ``max_frames`` and
    ``ignore_eos`` (a fixed length, for benchmarks), and the fields Anna does not know (warned about, ignored)."""

    model: str | None
    voice: VoiceRequest
    response_format: str
    stream_format: str
    max_frames: int | None
    ignore_eos: bool
    unknown_fields: tuple[str, ...]


def _str(body: dict[str, Any], key: str, default: str | None = None) -> str | None:
    value = body.get(key, default)
    if value is not None and not isinstance(value, str):
        raise InvalidRequestError(f"{key} must be a string", param=key)
    return value


def _ref_audio(body: dict[str, Any]) -> bytes | None:
    """Anna's ``ref_audio``: a recording's file bytes in base64, bare or as a ``data:`` URI; None when absent."""
    value = _str(body, "ref_audio")
    if value is None:
        return None
    if value.startswith("data:"):
        value = value.partition(",")[2]
    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequestError("ref_audio must be base64 (bare or a data: URI)", param="ref_audio") from None
    if not data:
        raise InvalidRequestError("ref_audio is empty", param="ref_audio")
    return data


def parse_body(body: Any) -> SpeechBody:
    """Check a decoded JSON body.

    Raises:
        InvalidRequestError: not an object; ``input`` missing or not a string; a field of the wrong type; a
            ``response_format`` libsndfile cannot write here; a ``stream_format`` other than ``audio`` / ``sse``;
            ``speed`` other than 1 (this model speaks at its own pace; a resampled speed would change the pitch);
            ``max_frames`` not a positive integer; a ``ref_audio`` that is not base64 (a ``data:`` URI or bare).
    """
    if not isinstance(body, dict):
        raise InvalidRequestError("the request body must be a JSON object")
    text = body.get("input")
    if not isinstance(text, str):
        raise InvalidRequestError("input is required and must be a string", param="input")
    speed = body.get("speed", 1.0)
    if isinstance(speed, bool) or not isinstance(speed, (int, float)):
        raise InvalidRequestError("speed must be a number", param="speed")
    if speed != 1.0:
        raise InvalidRequestError("speed other than 1.0 is not supported: Qwen3-TTS speaks at its own pace (ask for "
                                  "a pace in instructions where the model takes them)", param="speed")
    response_format = check_format(_str(body, "response_format", "mp3"))
    stream_format = _str(body, "stream_format", "audio")
    if stream_format not in STREAM_FORMATS:
        raise InvalidRequestError(f"stream_format must be one of {', '.join(STREAM_FORMATS)}", param="stream_format")
    max_frames = body.get("max_frames")
    if max_frames is not None and (isinstance(max_frames, bool) or not isinstance(max_frames, int) or max_frames < 1):
        raise InvalidRequestError("max_frames must be a positive integer", param="max_frames")
    ignore_eos = body.get("ignore_eos", False)
    if not isinstance(ignore_eos, bool):
        raise InvalidRequestError("ignore_eos must be a boolean", param="ignore_eos")
    if ignore_eos and max_frames is None:
        raise InvalidRequestError("ignore_eos needs max_frames (else the audio would run to the model's limit)",
                                  param="ignore_eos")
    voice = VoiceRequest(text=text, voice=_str(body, "voice"), instructions=_str(body, "instructions"),
                         language=_str(body, "language", "auto") or "auto", ref_audio=_ref_audio(body),
                         ref_text=_str(body, "ref_text"))
    return SpeechBody(model=_str(body, "model"), voice=voice, response_format=response_format,
                      stream_format=stream_format, max_frames=max_frames, ignore_eos=ignore_eos,
                      unknown_fields=tuple(sorted(set(body) - KNOWN)))
