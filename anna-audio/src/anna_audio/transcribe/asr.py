"""What the transcription service needs from a speech-recognition checkpoint, bound to the ``qwen3_asr`` family.

:class:`AsrPrompts` builds a window's prompt (language forcing and context), expands its audio placeholder with the
family's media processor, and reads the model's output back (``language X<asr_text>...`` -> the language and the
transcript, or the transcript alone while streaming).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from anna_core.errors import InvalidRequestError
from anna_core.multimodal import MultiModalInputs

TOKENS_PER_AUDIO_SECOND = 25
"""Output tokens a window may produce per second of its audio (speech runs at 3-8 tokens a second), plus
:data:`EXTRA_TOKENS` for the language prefix: bounds a runaway window and what memory admission reserves."""
EXTRA_TOKENS = 32
PROMPT_TOKENS = 256
"""Tokens of a window's prompt besides its audio (the chat template, a forced language, a short context) that
the window length leaves room for; a longer context shortens what is left for output."""


class AsrPrompts:
    """Prompts and output parsing of a loaded Qwen3-ASR model.

    Args:
        tokenizer: the checkpoint's :class:`anna_core.tokenizer.Tokenizer`.
        processor: the family's media processor (``LoadedModel.processor``), taking ``{"audio": [waveform]}``.
        languages: the languages the checkpoint knows (English names; empty: any name is passed through).
        max_window_s: seconds of audio the model accepts in one prompt.

    Raises:
        ValueError: ``max_window_s`` not positive, or a processor that takes no audio.
    """

    def __init__(self, tokenizer: Any, processor: Any, languages: Sequence[str], max_window_s: float):
        if not max_window_s > 0:
            raise ValueError(f"max_window_s must be positive, got {max_window_s}")
        if processor is None or "audio" not in processor.modalities:
            raise ValueError("a speech-recognition model needs a media processor that takes audio")
        from anna_audio.qwen3_asr.prompt import control_tokens

        self.tokenizer = tokenizer
        self.processor = processor
        self.languages = tuple(languages)
        self.max_window_s = float(max_window_s)
        self.control = control_tokens(tokenizer)

    @classmethod
    def from_loaded(cls, loaded: Any, max_model_len: int) -> AsrPrompts:
        """The prompts of a loaded ``qwen3_asr`` model: its languages, and windows as long as the family allows
        that leave room, within ``max_model_len`` tokens, for :data:`PROMPT_TOKENS` of prompt and
        :data:`TOKENS_PER_AUDIO_SECOND` output tokens per second of audio.

        Raises:
            TypeError: not a Qwen3-ASR model.
            ValueError: ``max_model_len`` leaves no room for a second of audio.
        """
        from anna_audio.qwen3_asr import prompt
        from anna_audio.qwen3_asr.model import Qwen3ASRModel

        if not isinstance(loaded.model, Qwen3ASRModel):
            raise TypeError(f"{type(loaded.model).__name__} is not a Qwen3-ASR model")
        languages = loaded.model.asr_config.support_languages or prompt.DEFAULT_LANGUAGES
        reserved = PROMPT_TOKENS + EXTRA_TOKENS
        by_output = (max_model_len - reserved) / (prompt.ROWS_PER_SECOND + TOKENS_PER_AUDIO_SECOND)
        if by_output < 1:
            raise ValueError(f"max_model_len {max_model_len} leaves no room for a second of audio")
        window_s = min(prompt.max_window_seconds(max_model_len, reserved_tokens=reserved), float(int(by_output)))
        return cls(loaded.tokenizer, loaded.processor, languages, window_s)

    def language(self, name: str | None) -> str | None:
        """The checkpoint's name of the language ``name`` (an ISO code or an English name), or None to detect it.

        Raises:
            InvalidRequestError: a language the model does not know (``param`` ``language``).
        """
        if name is None:
            return None
        from anna_audio.qwen3_asr.prompt import normalize_language

        try:
            return normalize_language(name, self.languages)
        except ValueError as exc:
            raise InvalidRequestError(str(exc), param="language") from None

    def detected_language(self, name: str | None) -> str | None:
        """The checkpoint's name of a language the model wrote (``language X<asr_text>``), or None when it names
        none (``None``) or a language the checkpoint does not list (a garbled answer)."""
        if name is None:
            return None
        from anna_audio.qwen3_asr.prompt import normalize_language

        try:
            return normalize_language(name, self.languages)
        except ValueError:
            return None

    def check_context(self, context: str | None) -> None:
        """Refuse a ``prompt`` holding a control token's text (``<|im_end|>``, ``<|audio_pad|>``, ``<asr_text>``,
        ...): it would be read as that token and break the prompt's turns or its audio placeholder.

        Raises:
            InvalidRequestError: ``param`` ``prompt``, naming the token.
        """
        from anna_audio.qwen3_asr.prompt import ASR_TEXT_TAG

        found = next((t for t in (*self.control, ASR_TEXT_TAG) if context and t in context), None)
        if found is not None:
            raise InvalidRequestError(f"'prompt' must be plain text: it holds {found!r}, one of the model's control "
                                      "tokens", param="prompt")

    def context_tokens(self, language: str | None, context: str | None) -> int:
        """Tokens ``context`` adds to a window's prompt (0 for None): what it takes from the model's context."""
        if not context:
            return 0
        from anna_audio.qwen3_asr.prompt import build_transcription_prompt

        with_context = build_transcription_prompt(self.tokenizer, language=language, context=context)
        return len(with_context) - len(build_transcription_prompt(self.tokenizer, language=language, context=None))

    def window_prompt(self, samples: np.ndarray, language: str | None, context: str | None
                      ) -> tuple[list[int], MultiModalInputs]:
        """One window's prompt ids (its audio placeholders expanded) and media.

        Args:
            samples: ``[N]`` float32, 16 kHz mono, at most ``max_window_s`` seconds.
            language: the checkpoint's language name (:meth:`language`) or None.
            context: the request's ``prompt`` (context, hot words) or None.

        Raises:
            InvalidRequestError: the processor refuses the audio.
        """
        from anna_audio.qwen3_asr.prompt import build_transcription_prompt

        ids = build_transcription_prompt(self.tokenizer, language=language, context=context)
        return self.processor.process(ids, {"audio": [samples]})

    def parse(self, text: str, language_forced: bool = False) -> tuple[str | None, str]:
        """``(language or None, transcript)`` of a window's whole output text, control tokens removed
        (``language_forced``: the prompt forced the language, so the whole answer is transcript)."""
        from anna_audio.qwen3_asr.prompt import parse_asr_output

        return parse_asr_output(text, language_forced=language_forced, control=self.control)

    def text_stream(self, language_forced: bool) -> Any:
        """A fresh incremental reader of a window's output: ``feed(delta) -> str`` and ``finish() -> str`` return the
        transcript's new text (never the language prefix, which a prompt that forced the language has not, nor a
        control token)."""
        from anna_audio.qwen3_asr.prompt import AsrTextStream

        return AsrTextStream(language_forced=language_forced, control=self.control)
