"""A synthesis request in words (text, voice, instructions, language, reference audio) -> the talker's
:class:`~anna_audio.qwen3_tts.prompt.SpeechRequest`, checked against what the checkpoint's kind takes.

The text wrappings are the reference's (QwenLM/Qwen3-TTS ``qwen_tts/inference/qwen3_tts_model.py``:
``_build_assistant_text``, ``_build_instruct_text``); the text goes whole into the prompt for CustomVoice and
VoiceDesign and is streamed with the codes for Base, the reference's defaults.
"""

from __future__ import annotations

from typing import Any

import attrs
import torch
from anna_core.errors import InvalidRequestError

from anna_audio.qwen3_tts.config import Qwen3TTSConfig
from anna_audio.qwen3_tts.prompt import SpeechRequest, language_id

MAX_INPUT_CHARS = 4096
"""The longest ``input`` accepted (OpenAI's limit for ``/v1/audio/speech``)."""


@attrs.frozen
class VoiceRequest:
    """What a client asks for: ``text`` to speak; ``voice`` (a CustomVoice speaker); ``instructions`` (style, or the
    described voice of VoiceDesign); ``language`` (a checkpoint language or ``auto``); ``ref_audio`` /
    ``ref_text``: a reference recording and its transcript (Base voice cloning)."""

    text: str
    voice: str | None = None
    instructions: str | None = None
    language: str = "auto"
    ref_audio: bytes | None = None
    ref_text: str | None = None


def assistant_text(text: str) -> str:
    return f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n"


def instruct_text(instructions: str) -> str:
    return f"<|im_start|>user\n{instructions}<|im_end|>\n"


def speech_request(config: Qwen3TTSConfig, tokenizer: Any, request: VoiceRequest) -> SpeechRequest:
    """Check ``request`` against the checkpoint and tokenize it (``tokenizer``: :class:`anna_core.tokenizer.Tokenizer`).

    Raises:
        InvalidRequestError: empty or over-long text (``param`` ``input``); a voice the checkpoint does not have, a
            voice on a checkpoint without named voices, none on one that needs it (``voice``); instructions on a
            checkpoint that takes none (``instructions``); an unknown language (``language``); reference audio, or
            a Base checkpoint without it (voice cloning is not available yet: ``ref_audio``).
    """
    if not request.text or not request.text.strip():
        raise InvalidRequestError("input must be non-empty text", param="input")
    if len(request.text) > MAX_INPUT_CHARS:
        raise InvalidRequestError(f"input is {len(request.text)} characters; the limit is {MAX_INPUT_CHARS}",
                                  param="input")
    if request.ref_audio is not None or config.accepts_reference_audio:
        raise InvalidRequestError("voice cloning needs the codec's encoder (reference audio -> codes), which this "
                                  "server does not have yet; use a CustomVoice or VoiceDesign checkpoint",
                                  param="ref_audio")
    speakers = sorted(config.talker.speakers)
    voice = request.voice or None
    if config.accepts_speaker:
        if voice is None:
            raise InvalidRequestError(f"voice is required; this model's voices: {', '.join(speakers)}", param="voice")
        if voice.lower() not in config.talker.speakers:
            raise InvalidRequestError(f"voice {voice!r} is not one of this model's voices: {', '.join(speakers)}",
                                      param="voice")
    elif voice is not None:
        raise InvalidRequestError(f"a {config.kind} model has no named voices; describe the voice in instructions"
                                  if config.accepts_instructions else f"a {config.kind} model has no named voices",
                                  param="voice")
    if request.instructions and not config.accepts_instructions:
        raise InvalidRequestError(f"this {config.kind} model takes no instructions", param="instructions")
    try:
        language_id(config, request.language or "auto", voice)
    except ValueError as exc:
        raise InvalidRequestError(str(exc), param="language") from None
    instruct = None
    if request.instructions:
        instruct = torch.tensor(tokenizer.encode(instruct_text(request.instructions)), dtype=torch.int64)
    return SpeechRequest(
        assistant_ids=torch.tensor(tokenizer.encode(assistant_text(request.text)), dtype=torch.int64),
        language=request.language or "auto", speaker=voice, instruct_ids=instruct,
        non_streaming_text=config.kind != "base")
