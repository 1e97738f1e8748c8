"""A synthesis request in words (text, voice, instructions, language, reference audio) -> the talker's
:class:`~anna_audio.qwen3_tts.prompt.SpeechRequest`, checked against what the checkpoint's kind takes.

The text wrappings are the reference's (QwenLM/Qwen3-TTS ``qwen_tts/inference/qwen3_tts_model.py``:
``_build_assistant_text``, ``_build_ref_text``, ``_build_instruct_text``); the text goes whole into the prompt for
CustomVoice and VoiceDesign and is streamed with the codes for Base, the reference's defaults.

Voice cloning (Base) goes through a :class:`VoiceCloner` (reference audio -> x-vector and, with a transcript, the
reference codes for in-context cloning: :class:`~anna_audio.qwen3_tts.voice_clone.RecordingCloner`); without one (a
random-weight load), reference audio is refused with a 400 that says what is missing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import attrs
import torch
from anna_core.errors import InvalidRequestError

from anna_audio.qwen3_tts.config import Qwen3TTSConfig
from anna_audio.qwen3_tts.prompt import SpeechRequest, language_id

MAX_INPUT_CHARS = 4096
"""The longest ``input`` accepted (OpenAI's limit for ``/v1/audio/speech``)."""
MAX_INSTRUCTIONS_CHARS = 4096
"""The longest ``instructions`` accepted (a style, or VoiceDesign's described voice: as long as ``input`` may be)."""
MAX_REF_TEXT_CHARS = 2048
"""The longest ``ref_text`` accepted: the transcript of at most 60 s of reference audio
(:class:`~anna_audio.qwen3_tts.voice_clone.VoiceCloneLimits`) is a few hundred words."""


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


@attrs.frozen
class ClonePrompt:
    """What a :class:`VoiceCloner` makes of a reference recording: ``speaker_embedding`` ``[H]`` (the x-vector) and
    ``ref_codes`` ``[F, G]`` int64, the recording's codes for in-context cloning (None: x-vector only)."""

    speaker_embedding: torch.Tensor
    ref_codes: torch.Tensor | None = None


class VoiceCloner(Protocol):
    """Reference audio -> :class:`ClonePrompt` (the speaker encoder, and the codec's encoder when ``ref_text`` is
    given: in-context cloning). Raises ``InvalidRequestError`` (``param`` ``ref_audio``) for audio it refuses."""

    def clone(self, ref_audio: bytes, ref_text: str | None) -> ClonePrompt: ...


NO_CLONER = ("voice cloning needs the checkpoint's speaker and codec encoders, which this load does not have "
             "(a random-weight load); load the Base checkpoint's weights")


def control_tokens(tokenizer: Any) -> tuple[str, ...]:
    """The texts of the checkpoint's added tokens (``<|im_start|>``, ``<|im_end|>``, ``<tts_pad>``, ...), which the
    tokenizer reads as control tokens wherever they appear in a text.

    Args:
        tokenizer: an :class:`anna_core.tokenizer.Tokenizer` (its ``hf.added_tokens_decoder`` lists them).
    """
    added = tokenizer.hf.added_tokens_decoder.values()
    return tuple(sorted({str(t.content) for t in added if str(t.content)}))


def check_plain_text(text: str | None, field: str, control: Sequence[str]) -> None:
    """Refuse a text field that holds a control token's text: tokenized into the prompt, it would become that token
    and could close the talker's turn and open another (``<|im_end|><|im_start|>system ...``).

    Args:
        text: the field's value (None: nothing to check).
        field: the request field's name, reported as the error's ``param``.
        control: the checkpoint's control-token texts (:func:`control_tokens`).

    Raises:
        InvalidRequestError: ``param`` ``field``, naming the token.
    """
    found = next((t for t in control if text and t and t in text), None)
    if found is not None:
        raise InvalidRequestError(f"'{field}' must be plain text: it holds {found!r}, one of the model's control "
                                  "tokens", param=field)


def check_ref_text(ref_text: str | None, control: Sequence[str]) -> None:
    """Refuse a reference transcript longer than :data:`MAX_REF_TEXT_CHARS` or holding a control token.

    Raises:
        InvalidRequestError: ``param`` ``ref_text``.
    """
    if ref_text is not None and len(ref_text) > MAX_REF_TEXT_CHARS:
        raise InvalidRequestError(f"ref_text is {len(ref_text)} characters; the limit is {MAX_REF_TEXT_CHARS}",
                                  param="ref_text")
    check_plain_text(ref_text, "ref_text", control)


def assistant_text(text: str) -> str:
    return f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n"


def ref_text_wrapped(text: str) -> str:
    return f"<|im_start|>assistant\n{text}<|im_end|>\n"


def instruct_text(instructions: str) -> str:
    return f"<|im_start|>user\n{instructions}<|im_end|>\n"


def speech_request(config: Qwen3TTSConfig, tokenizer: Any, request: VoiceRequest,
                   cloner: VoiceCloner | None = None) -> SpeechRequest:
    """Check ``request`` against the checkpoint and tokenize it (``tokenizer``: :class:`anna_core.tokenizer.Tokenizer`;
    ``cloner``: the checkpoint's :class:`VoiceCloner`, None where voice cloning is not available).

    Raises:
        InvalidRequestError: empty or over-long text (``param`` ``input``); instructions over
            :data:`MAX_INSTRUCTIONS_CHARS` (``instructions``); ``input``, ``instructions`` or
            ``ref_text`` holding a control token's text (:func:`check_plain_text`, ``param`` the field), a
            ``ref_text`` over :data:`MAX_REF_TEXT_CHARS` (``ref_text``); a voice the checkpoint does not have, a
            voice on a checkpoint without named voices, none on one that needs it (``voice``); instructions on a
            checkpoint that takes none (``instructions``); an unknown language (``language``); reference audio to a
            checkpoint that takes none, a Base checkpoint without reference audio, or either without a cloner
            (``ref_audio``); what the cloner refuses.
    """
    if not request.text or not request.text.strip():
        raise InvalidRequestError("input must be non-empty text", param="input")
    if len(request.text) > MAX_INPUT_CHARS:
        raise InvalidRequestError(f"input is {len(request.text)} characters; the limit is {MAX_INPUT_CHARS}",
                                  param="input")
    if request.instructions is not None and len(request.instructions) > MAX_INSTRUCTIONS_CHARS:
        raise InvalidRequestError(f"instructions are {len(request.instructions)} characters; the limit is "
                                  f"{MAX_INSTRUCTIONS_CHARS}", param="instructions")
    control = control_tokens(tokenizer)
    check_plain_text(request.text, "input", control)
    check_plain_text(request.instructions, "instructions", control)
    check_ref_text(request.ref_text, control)
    if request.ref_audio is not None and not config.accepts_reference_audio:
        raise InvalidRequestError(f"a {config.kind} model takes no reference audio", param="ref_audio")
    if config.accepts_reference_audio and cloner is None:
        raise InvalidRequestError(NO_CLONER, param="ref_audio")
    if config.accepts_reference_audio and request.ref_audio is None:
        raise InvalidRequestError("a Base model speaks in a cloned voice: send ref_audio (and ref_text for "
                                  "in-context cloning)", param="ref_audio")
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
    clone = ref_ids = None
    if request.ref_audio is not None:
        clone = cloner.clone(request.ref_audio, request.ref_text or None)
        if clone.ref_codes is not None:
            if not request.ref_text:
                raise InvalidRequestError("in-context cloning needs ref_text, the reference's transcript",
                                          param="ref_text")
            ref_ids = torch.tensor(tokenizer.encode(ref_text_wrapped(request.ref_text)), dtype=torch.int64)
    return SpeechRequest(
        assistant_ids=torch.tensor(tokenizer.encode(assistant_text(request.text)), dtype=torch.int64),
        language=request.language or "auto", speaker=voice, instruct_ids=instruct,
        speaker_embedding=None if clone is None else clone.speaker_embedding, ref_ids=ref_ids,
        ref_codes=None if ref_ids is None else clone.ref_codes, non_streaming_text=config.kind != "base")
