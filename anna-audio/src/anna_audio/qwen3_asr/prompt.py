"""Qwen3-ASR's prompt and output protocol (a public API: the transcription route builds on it).

The prompt is the checkpoint's chat template over a system turn holding the context (hotwords, names, a previous
transcript: text that biases the transcription; empty when none) and a user turn holding one audio, with the
assistant turn opened::

    <|im_start|>system\\n{context}<|im_end|>\\n<|im_start|>user\\n<|audio_start|><|audio_pad|><|audio_end|><|im_end|>\\n
    <|im_start|>assistant\\n

The model answers ``language {Language}<asr_text>{transcript}`` (``language None<asr_text>`` for audio without
speech). Forcing a language writes ``language {Language}<asr_text>`` after the opened assistant turn, so the model
writes the transcript alone: what upstream ``qwen-asr`` (``Qwen3ASRModel._build_text_prompt``) and transformers'
``Qwen3ASRProcessor.apply_transcription_request`` both do. The one ``<|audio_pad|>`` is expanded to the audio's
encoder rows by :class:`anna_audio.qwen3_asr.processor.Qwen3ASRProcessor`.

:func:`parse_asr_output` splits a whole answer, :class:`AsrTextStream` does the same on streamed deltas without
letting the prefix through; both drop the checkpoint's control tokens (:func:`control_tokens`: ``<think>``,
``<|im_end|>``, ... which the decode keeps when they are not marked special, as transformers'
``Qwen3ASRProcessor.decode`` keeps them) so that none reaches a transcript; :func:`supported_languages` /
:func:`normalize_language` check a requested language; :data:`MAX_AUDIO_WINDOW_S` / :func:`max_window_seconds`
bound the audio one prompt carries.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from anna_audio.languages import english_name

ASR_TEXT_TAG = "<asr_text>"
LANGUAGE_PREFIX = "language "
AUDIO_PLACEHOLDER = "<|audio_pad|>"
MAX_AUDIO_WINDOW_S = 1200.0
"""The longest audio upstream ``qwen-asr`` transcribes in one prompt (``MAX_ASR_INPUT_SECONDS``); longer audio is
cut into windows of at most this length. Neither the config nor the processor bounds it otherwise, except the
context length (:func:`max_window_seconds`)."""
ROWS_PER_SECOND = 13
"""Encoder rows per second of audio (100 mel frames -> 13 rows; :func:`anna_audio.features.encoder_rows`)."""
MAX_PREFIX_CHARS = 48
"""An answer is taken to have a ``language X<asr_text>`` prefix only if the tag ends within this many characters
(language names are single words): a stream holds back at most this much."""

DEFAULT_LANGUAGES = ("Chinese", "English", "Cantonese", "Arabic", "German", "French", "Spanish", "Portuguese",
                     "Indonesian", "Italian", "Korean", "Russian", "Thai", "Vietnamese", "Japanese", "Turkish",
                     "Hindi", "Malay", "Dutch", "Swedish", "Danish", "Finnish", "Polish", "Czech", "Filipino",
                     "Persian", "Greek", "Romanian", "Hungarian", "Macedonian")
"""The 30 languages of the released Qwen3-ASR models (their ``support_languages``), for configs without the list
(the ``hf`` layout drops it)."""
BARE_PREFIX_NAMES = frozenset(name.lower() for name in (*DEFAULT_LANGUAGES, "None"))
"""The names (any case) that stand for a language prefix without ``language`` before them: ``English<asr_text>``."""


def build_transcription_prompt(tokenizer: Any, *, language: str | None, context: str | None) -> list[int]:
    """The token ids of one transcription prompt with ONE ``<|audio_pad|>`` (see the module docstring).

    Args:
        tokenizer: the checkpoint's :class:`anna_core.tokenizer.Tokenizer` (``LoadedModel.tokenizer``): its chat
            template renders the turns.
        language: a canonical language name to force (:func:`normalize_language`), or None to let the model
            detect it.
        context: the system turn's text, or None (empty).

    Raises:
        ValueError: ``language`` empty or holding ``<`` or a line break; the template renders a number of audio
            placeholders other than one.
        anna_core.errors.InvalidRequestError: the tokenizer has no chat template, or it rejects the messages.
    """
    messages = [{"role": "system", "content": context or ""},
                {"role": "user", "content": [{"type": "audio"}]}]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    if language is not None:
        if not language.strip() or "<" in language or "\n" in language:
            raise ValueError(f"a forced language must be a plain name, got {language!r}")
        text += f"{LANGUAGE_PREFIX}{language}{ASR_TEXT_TAG}"
    ids = tokenizer.encode(text)
    placeholder = tokenizer.hf.convert_tokens_to_ids(AUDIO_PLACEHOLDER)
    if ids.count(placeholder) != 1:
        raise ValueError(f"the chat template wrote {ids.count(placeholder)} audio placeholders ({AUDIO_PLACEHOLDER}) "
                         "for one audio")
    return ids


def control_tokens(tokenizer: Any) -> tuple[str, ...]:
    """The texts of the checkpoint's added tokens (``<|im_end|>``, ``<think>``, ``<tool_call>``, ``<|audio_pad|>``,
    ...) except ``<asr_text>``: control tokens that are never words of a transcript.

    The detokenizer drops the ones marked special (``skip_special_tokens``, as transformers' ``Qwen3ASRProcessor
    .decode`` does), but the Qwen3 vocabulary marks ``<think>``, ``</think>``, ``<tool_call>``, ... not special, so
    a sampled or random-weight answer can still hold them; :class:`ControlTokenFilter` removes them.

    Args:
        tokenizer: an :class:`anna_core.tokenizer.Tokenizer` (its ``hf.added_tokens_decoder`` lists them), or None
            (a shape-only folder loaded with dummy weights: no tokens, none to drop).
    """
    if tokenizer is None:
        return ()
    added = tokenizer.hf.added_tokens_decoder.values()
    return tuple(sorted({str(t.content) for t in added if str(t.content) and str(t.content) != ASR_TEXT_TAG}))


def _tag_pattern(tags: Sequence[str]) -> re.Pattern[str] | None:
    """A regular expression matching any of ``tags`` (the longest first), or None for none."""
    tags = [t for t in tags if t]
    return re.compile("|".join(re.escape(t) for t in sorted(tags, key=len, reverse=True))) if tags else None


def _without(text: str, tags: Sequence[str]) -> str:
    """``text`` with every occurrence of ``tags`` removed, in one left-to-right scan (characters that spell a tag
    only once another is removed are text)."""
    pattern = _tag_pattern(tags)
    return pattern.sub("", text) if pattern is not None else text


def _held_suffix(text: str, tags: Sequence[str]) -> int:
    """The length of the longest end of ``text`` that begins (but is not) one of ``tags``: held back while
    streaming, as the next delta may complete it."""
    longest = min(len(text), max((len(t) for t in tags), default=1) - 1)
    return next((k for k in range(longest, 0, -1) if any(t.startswith(text[-k:]) for t in tags)), 0)


class ControlTokenFilter:
    """Removes control tokens (:func:`control_tokens`) from text that arrives in pieces: the concatenation of every
    :meth:`feed` and :meth:`finish` result is the whole text without them however it is cut (a possible beginning
    of a control token at a piece's end is held back until the next piece or :meth:`finish`).

    Args:
        tags: the texts to remove (an empty tuple passes text through).
    """

    def __init__(self, tags: Sequence[str] = ()):
        self.tags = tuple(t for t in tags if t)
        self._pattern = _tag_pattern(self.tags)
        self._tail = ""

    def feed(self, piece: str) -> str:
        """The text of ``piece`` (and what was held) that is certainly no part of a control token."""
        if self._pattern is None:
            return piece
        text = self._tail + piece
        kept, pos = [], 0
        for match in self._pattern.finditer(text):  # text before the last match is settled
            kept.append(text[pos:match.start()])
            pos = match.end()
        rest = text[pos:]
        keep = _held_suffix(rest, self.tags)
        self._tail = rest[len(rest) - keep:] if keep else ""
        return "".join(kept) + rest[:len(rest) - keep]

    def finish(self) -> str:
        """What was held back (it never became a control token)."""
        tail, self._tail = self._tail, ""
        return tail


def _language_of(prefix: str) -> str | None:
    """The language a ``language X`` prefix names (its first line after ``language``; None for ``None`` or
    nothing)."""
    text = prefix.strip()
    named = _NAMED_RE.match(text)
    if named:
        text = text[named.end():].strip()
    name = text.splitlines()[0].strip() if text else ""
    return None if not name or name.lower() == "none" else name


def parse_asr_output(text: str, *, language_forced: bool = False,
                     control: Sequence[str] = ()) -> tuple[str | None, str]:
    """``(detected language, transcript)`` of a whole answer.

    ``language English<asr_text> Hello.`` gives ``("English", "Hello.")``; ``language None<asr_text>`` gives
    ``(None, "")``; an answer without ``<asr_text>`` is all transcript: ``(None, text.strip())``. The transcript is
    stripped of surrounding whitespace.

    The text before the first ``<asr_text>`` is the language prefix (dropped) when it is what the model writes there
    (:func:`_is_prefix`): ``language`` and a name, or a bare language name of :data:`BARE_PREFIX_NAMES`
    (``English<asr_text>``), without ``<``, the tag ending within :data:`MAX_PREFIX_CHARS` characters. Anything
    else before the tag is transcript (``Hello<asr_text> world`` gives ``"Hello world"``); upstream ``qwen-asr``
    (``parse_asr_output``) drops whatever precedes the tag, which no stream could do without holding back the whole
    answer.

    Args:
        language_forced: the prompt forced the language (it holds the prefix): the whole answer is transcript.
        control: control-token texts (:func:`control_tokens`) removed from the answer before it is read.
    """
    text = _without(text, [t for t in control if t])
    if language_forced or ASR_TEXT_TAG not in text:
        return None, _untagged(text).strip()
    prefix, transcript = text.split(ASR_TEXT_TAG, 1)
    if not _is_prefix(prefix):  # the tag without a ``language X`` before it: all transcript
        return None, _untagged(text).strip()
    return _language_of(prefix), _untagged(transcript).strip()


_MAX_PREFIX = MAX_PREFIX_CHARS - len(ASR_TEXT_TAG)
"""The longest text a language prefix may be before its tag."""


def _is_prefix(prefix: str) -> bool:
    """Whether ``prefix`` (the text before the first ``<asr_text>``) is a language prefix: ``language`` (any case)
    and whitespace, then a name; or a bare name of :data:`BARE_PREFIX_NAMES` between whitespace; no ``<``; at most
    :data:`_MAX_PREFIX` characters. Anything else before the tag is transcript."""
    if "<" in prefix or len(prefix) > _MAX_PREFIX:
        return False
    return _NAMED_RE.match(prefix) is not None or prefix.strip().lower() in BARE_PREFIX_NAMES


def _could_be_prefix(head: str) -> bool:
    """Whether some continuation of ``head`` (streamed text holding no whole ``<asr_text>``) makes its beginning a
    language prefix followed by the tag (:func:`_is_prefix`): exactly, so that a stream that stops holding ``head``
    back decides as :func:`parse_asr_output` does on the whole answer."""
    if "<" in head:  # the prefix has no ``<``: the first one begins the tag
        at = head.index("<")
        return ASR_TEXT_TAG.startswith(head[at:]) and _is_prefix(head[:at])
    if len(head) > _MAX_PREFIX:
        return False
    if _PREFIX_RE.fullmatch(head):  # ``language <name>``, or a beginning of it
        return True
    name = head.lstrip()
    bare = name.rstrip()
    if bare != name:  # whitespace after a name: the name is whole
        return bare.lower() in BARE_PREFIX_NAMES
    return any(known.startswith(bare.lower()) for known in BARE_PREFIX_NAMES)


def _untagged(text: str) -> str:
    """``text`` without any ``<asr_text>`` (never transcript: a sampled answer may repeat the tag), in one
    left-to-right scan as control tokens are removed (:func:`_without`): characters that spell the tag only once
    another is removed are text, as a stream can tell without holding back an unbounded tail."""
    return text.replace(ASR_TEXT_TAG, "")


_NAMED_RE = re.compile(r"\s*language\s+", re.IGNORECASE)
_PREFIX_RE = re.compile(r"\s*(?:l(?:a(?:n(?:g(?:u(?:a(?:g(?:e(?:\s[^<]*)?)?)?)?)?)?)?)?)?", re.IGNORECASE)


class AsrTextStream:
    """Turns the streamed deltas of one answer into transcript deltas: the ``language X<asr_text>`` prefix never
    comes out, even split across deltas, and the concatenation of every :meth:`feed` and :meth:`finish` result
    equals :func:`parse_asr_output`'s transcript of the whole answer with the same ``language_forced``, however the
    answer is cut (text that may still become a prefix, at most :data:`MAX_PREFIX_CHARS` characters, is held back:
    ``Hi`` until it cannot be ``Hindi``).

    Args:
        language_forced: the prompt forced the language (the answer has no prefix): every character after leading
            whitespace is transcript.
        control: control-token texts (:func:`control_tokens`), removed from the deltas first
            (:class:`ControlTokenFilter`).

    Attributes:
        language: the detected language once the prefix has been read (None before, when forced, or for
            ``language None``).
    """

    def __init__(self, language_forced: bool = False, control: Sequence[str] = ()):
        self._control = ControlTokenFilter(control)
        self._head = ""  # text that may still be (part of) the prefix
        self._in_text = language_forced
        self._started = False  # a non-space transcript character was emitted
        self._pending_space = ""  # whitespace held back: it is dropped if the answer ends after it
        self._tags = ControlTokenFilter((ASR_TEXT_TAG,))  # repeated tags in the transcript, removed as _untagged
        self.language: str | None = None

    def feed(self, delta: str) -> str:
        """The transcript text ``delta`` completes (maybe ``""``)."""
        return self._feed(self._control.feed(delta))

    def _feed(self, delta: str) -> str:
        if self._in_text:
            return self._text(delta)
        self._head += delta
        if ASR_TEXT_TAG in self._head:
            prefix, rest = self._head.split(ASR_TEXT_TAG, 1)
            if _is_prefix(prefix):
                self.language, self._head, self._in_text = _language_of(prefix), "", True
                return self._text(rest)
        elif _could_be_prefix(self._head):
            return ""
        head, self._head, self._in_text = self._head, "", True
        return self._text(head)

    def finish(self) -> str:
        """The rest once the answer has ended: a held text that never became a prefix (trailing whitespace is
        dropped)."""
        out = self._feed(self._control.finish())
        head, self._head, self._in_text = self._head, "", True
        out += self._text(head) + self._emit(self._tags.finish())
        self._pending_space = ""
        return out

    def _text(self, text: str) -> str:
        """Transcript text without ``<asr_text>`` tags (one split across deltas too: a possible beginning of one
        at the end is held back until the next delta or :meth:`finish`)."""
        return self._emit(self._tags.feed(text))

    def _emit(self, text: str) -> str:
        if not self._started:
            text = text.lstrip()
            if not text:
                return ""
            self._started = True
        body = text.rstrip()
        if not body:
            self._pending_space += text
            return ""
        out = self._pending_space + body
        self._pending_space = text[len(body):]
        return out


def supported_languages(config: dict[str, Any]) -> list[str]:
    """The language names a checkpoint transcribes: ``config.json``'s ``support_languages`` (original layout), else
    the 30 of the released models (:data:`DEFAULT_LANGUAGES`)."""
    listed = config.get("support_languages")
    return [str(x) for x in listed] if listed else list(DEFAULT_LANGUAGES)


def normalize_language(name: str, supported: Sequence[str]) -> str:
    """The canonical name (as in ``supported``) of ``name``: a language name in any case (``"english"``) or an ISO
    code (``"en"``, ``"yue"``).

    Raises:
        ValueError: ``name`` names no language in ``supported``; the message lists them.
    """
    by_lower = {s.lower(): s for s in supported}
    canonical = by_lower.get(str(name).strip().lower()) or by_lower.get(english_name(name))
    if canonical is None:
        raise ValueError(f"unsupported language {name!r}; this model transcribes {', '.join(supported)} "
                         "(names or ISO 639-1 codes)")
    return canonical


def max_window_seconds(max_model_len: int, *, reserved_tokens: int = 0) -> float:
    """The longest audio window, in seconds, one prompt may carry: :data:`MAX_AUDIO_WINDOW_S`, or less when its
    placeholders (:data:`ROWS_PER_SECOND` per second) plus ``reserved_tokens`` (the prompt's text and the tokens
    to generate) would not fit ``max_model_len``.

    Raises:
        ValueError: not even one second fits.
    """
    seconds = (max_model_len - reserved_tokens) // ROWS_PER_SECOND
    if seconds < 1:
        raise ValueError(f"max_model_len {max_model_len} leaves no room for audio after {reserved_tokens} tokens")
    return float(min(MAX_AUDIO_WINDOW_S, seconds))
