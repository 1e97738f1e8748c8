"""The ``transcribe`` task's client: audio in, windows to the engine, one transcript out.

A request's audio is decoded (:func:`~anna_audio.audio_io.decode_audio`), cut into windows the model accepts
(:func:`~anna_audio.transcribe.windows.split_windows`), and every window becomes its own engine request, so the
windows of one long upload and the requests of many clients batch together in the engine. The windows' texts are
joined in order (:class:`TextJoiner`); timestamps come from the forced aligner when one is loaded, else a segment
per window.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import AsyncIterator
from typing import Any

import attrs
from anna_core.engine.sampling_params import SamplingParams
from anna_core.errors import InvalidRequestError
from anna_core.multimodal import MultiModalInputs

from anna_audio.audio_io import AudioLimits, DecodedAudio, decode_audio
from anna_audio.transcribe.asr import EXTRA_TOKENS, TOKENS_PER_AUDIO_SECOND, AsrPrompts
from anna_audio.transcribe.formats import Segment, Transcript, Word
from anna_audio.transcribe.request import TranscriptionRequest
from anna_audio.transcribe.windows import AudioWindow, split_windows


@attrs.frozen
class WindowJob:
    """One window's engine request: its place in the audio, prompt ids and media."""

    window: AudioWindow
    prompt_ids: list[int]
    multimodal: MultiModalInputs
    params: SamplingParams


@attrs.frozen
class TranscriptionJob:
    """A prepared request: the decoded audio, the checkpoint's language name (None: detect) and its windows."""

    request: TranscriptionRequest
    audio: DecodedAudio
    language: str | None
    windows: tuple[WindowJob, ...]


def _is_cjk(char: str) -> bool:
    return unicodedata.east_asian_width(char) in ("W", "F")


class TextJoiner:
    """Joins the windows' texts: a space between two windows unless one side already has one or both sides are
    wide (CJK) characters, which are written without spaces. Fed piece by piece, the pieces it returns concatenate
    to the whole text, so streamed deltas and the final text agree."""

    def __init__(self) -> None:
        self.text = ""
        self._fresh = False

    def next_window(self) -> None:
        """The following pieces belong to the next window."""
        self._fresh = True

    def feed(self, piece: str) -> str:
        """The text to append for ``piece`` (with the separator before a window's first non-empty piece)."""
        if not piece:
            return ""
        if self._fresh:
            self._fresh = False
            piece = piece.lstrip()
            if not piece:
                self._fresh = True
                return ""
            if self.text and not self.text[-1].isspace() and not (_is_cjk(self.text[-1]) and _is_cjk(piece[0])):
                piece = " " + piece
        self.text += piece
        return piece


class TranscriptionPlanner:
    """Turns a transcription request into window requests for the engine and their outputs into a transcript
    (shared by the server's :class:`Transcriber` and ``anna transcribe``).

    Args:
        prompts: the model's prompts and output parsing (:class:`AsrPrompts`).
        max_model_len: prompt + output tokens per engine request.
        limits: caps on an upload (default :class:`AudioLimits` ()).
        aligner: the forced aligner (:class:`~anna_audio.transcribe.aligner.ForcedAligner`) or None (then
            ``timestamp_granularities`` are refused, naming ``--asr-aligner-dir``).
        tokens_per_second / extra_tokens: a window's output limit is ``ceil(seconds * tokens_per_second) +
            extra_tokens`` (within what the context leaves).
    """

    def __init__(self, prompts: AsrPrompts, *, max_model_len: int, limits: AudioLimits | None = None,
                 aligner: Any = None, tokens_per_second: float = TOKENS_PER_AUDIO_SECOND,
                 extra_tokens: int = EXTRA_TOKENS):
        self.prompts = prompts
        self.max_model_len = max_model_len
        self.limits = limits or AudioLimits()
        self.aligner = aligner
        self.tokens_per_second = tokens_per_second
        self.extra_tokens = extra_tokens

    def window_params(self, window: AudioWindow, prompt_len: int, temperature: float,
                      context_tokens: int = 0) -> SamplingParams:
        """A window's sampling: ``temperature`` (0: greedy), at most ``tokens_per_second`` tokens per second of its
        audio plus ``extra_tokens`` (within what the context leaves when the request has no ``prompt``).

        Args:
            prompt_len: the window's prompt tokens (its audio placeholders expanded).
            context_tokens: of those, the tokens of the request's ``prompt`` field (:meth:`AsrPrompts.context_tokens`).

        Raises:
            InvalidRequestError: ``param`` ``prompt``: the request's ``prompt`` takes room the window's transcript
                needs (the message gives its tokens and the most it may have); ``param`` ``file``: the window's
                audio alone leaves no room for output.
        """
        seconds = window.end_s - window.start_s
        wanted = math.ceil(seconds * self.tokens_per_second) + self.extra_tokens
        rest = prompt_len - context_tokens  # the template and the audio placeholders
        if context_tokens and prompt_len + wanted > self.max_model_len:
            allowed = max(0, self.max_model_len - rest - wanted)
            raise InvalidRequestError(
                f"'prompt' is too long: {context_tokens} tokens > {allowed}, what the model's context of "
                f"{self.max_model_len} tokens leaves beside a {seconds:.1f} s audio window ({rest} prompt tokens) and "
                f"its transcript (up to {wanted} tokens); shorten the prompt", param="prompt")
        room = self.max_model_len - prompt_len
        if room <= 0:
            raise InvalidRequestError(
                f"the audio window of {seconds:.1f} s is too long for the model: its prompt has {prompt_len} tokens, "
                f"the model's context {self.max_model_len}", param="file")
        return SamplingParams(max_tokens=min(room, wanted), temperature=temperature)

    def prepare(self, request: TranscriptionRequest) -> TranscriptionJob:
        """Decode, check and window a request (CPU work: run it in a worker thread).

        Raises:
            InvalidRequestError: an upload :func:`decode_audio` refuses (empty, truncated, unknown container, over a
                cap), audio without samples, an unknown language, a ``prompt`` holding control tokens or too long
                for the context (:meth:`window_params`), or timestamps asked of a server without an aligner (the
                message names ``--asr-aligner-dir``) or in a language the aligner does not know.
        """
        if request.granularities and self.aligner is None:
            raise InvalidRequestError("timestamp_granularities need the forced aligner: start the server with "
                                      "--asr-aligner-dir", param="timestamp_granularities[]")
        language = self.prompts.language(request.language)
        if request.granularities:
            self.aligner.check_language(language)
        self.prompts.check_context(request.prompt)
        context_tokens = self.prompts.context_tokens(language, request.prompt)
        audio = decode_audio(request.audio, self.limits)
        windows = split_windows(audio.samples, self.prompts.max_window_s, sample_rate=audio.sample_rate)
        if not windows:
            raise InvalidRequestError("audio refused: the file holds no samples", param="file")
        jobs = []
        for window in windows:
            ids, mm = self.prompts.window_prompt(audio.samples[window.start:window.end], language, request.prompt)
            params = self.window_params(window, len(ids), request.temperature, context_tokens)
            jobs.append(WindowJob(window, ids, mm, params))
        return TranscriptionJob(request, audio, language, tuple(jobs))

    def engine_jobs(self, job: TranscriptionJob, request_id: str) -> tuple[list[tuple[str, list[int], SamplingParams]],
                                                                           list[MultiModalInputs]]:
        """``(request id, prompt ids, params)`` of each window (ids ``<request_id>-w<i>``) and their media."""
        jobs = [(f"{request_id}-w{i}", w.prompt_ids, w.params) for i, w in enumerate(job.windows)]
        return jobs, [w.multimodal for w in job.windows]

    def assemble(self, job: TranscriptionJob, outputs: list[str]) -> Transcript:
        """The transcript of the windows' whole output texts (in window order), timed by the aligner when the
        request asked for timestamps (CPU / device work: run it in a worker thread)."""
        forced = job.language is not None
        parsed = [self.prompts.parse(text, language_forced=forced) for text in outputs]
        joiner = TextJoiner()
        for _, text in parsed:
            joiner.next_window()
            joiner.feed(text)
        language = job.language or next((x for x in (self.prompts.detected_language(lang) for lang, _ in parsed)
                                         if x), None)
        segments: list[Segment] = []
        words: list[Word] = []
        for w, (lang, text) in zip(job.windows, parsed):
            text = text.strip()
            if not text:
                continue
            if job.request.granularities:
                samples = job.audio.samples[w.window.start:w.window.end]
                span = w.window.end_s - w.window.start_s  # the aligner's bins may run past the window: clamp
                said = job.language or self.prompts.detected_language(lang)
                timed = [Word(x.word, w.window.start_s + min(x.start, span), w.window.start_s + min(x.end, span))
                         for x in self.aligner.align(samples, text, said)]
                words.extend(timed)
                start = timed[0].start if timed else w.window.start_s
                end = timed[-1].end if timed else w.window.end_s
                segments.append(Segment(start, end, text))
            else:
                segments.append(Segment(w.window.start_s, w.window.end_s, text))
        return Transcript(text=joiner.text, language=language, duration_s=job.audio.duration_s,
                          segments=tuple(segments), words=tuple(words))

    async def deltas(self, job: TranscriptionJob, outputs: AsyncIterator[tuple[int, Any]]
                     ) -> AsyncIterator[str]:
        """The transcript's text as it is produced, in window order (a later window's text waits until the ones
        before it have finished); the pieces concatenate to :meth:`assemble`'s text of the same outputs.

        Args:
            outputs: ``(window index, RequestOutput)`` as :func:`anna_core.server.fanout.merged` yields them.
        """
        n = len(job.windows)
        readers = [self.prompts.text_stream(language_forced=job.language is not None) for _ in range(n)]
        pending: list[list[str]] = [[] for _ in range(n)]
        finished = [False] * n
        joiner = TextJoiner()
        joiner.next_window()
        current = 0
        async for i, out in outputs:
            piece = readers[i].feed(out.delta_text or "")
            if out.finished:
                piece += readers[i].finish()
                finished[i] = True
            pending[i].append(piece)
            while current < n:
                text = "".join(pending[current])
                pending[current].clear()
                emitted = joiner.feed(text)
                if emitted:
                    yield emitted
                if not finished[current]:
                    break
                current += 1
                joiner.next_window()


class Transcriber:
    """The ``transcribe`` task's client (``server.engine`` of a transcription server): the running engine and the
    planner the routes use.

    Args:
        engine: the running :class:`~anna_core.engine.async_engine.AsyncEngine` over the ASR model.
        planner: :class:`TranscriptionPlanner` of the model.
    """

    def __init__(self, engine: Any, planner: TranscriptionPlanner):
        self.engine = engine
        self.planner = planner

    @property
    def metrics(self) -> Any:
        return self.engine.metrics

    @property
    def degraded(self) -> str | None:
        return self.engine.degraded

    def stats(self) -> dict[str, Any]:
        stats = dict(self.engine.stats())
        stats["transcription"] = {"max_window_s": self.planner.prompts.max_window_s,
                                  "aligner": self.planner.aligner is not None}
        return stats

    async def shutdown(self, drain: bool = True) -> None:
        await self.engine.shutdown(drain)

    def check_room(self, job: TranscriptionJob) -> None:
        """Refuse a job of more windows than the engine's waiting queue ever holds (each window is one request, all
        submitted at once, so it would be a 429 on every retry).

        Raises:
            InvalidRequestError: too many windows for ``--scheduler-max-waiting-requests`` (``param`` ``file``).
        """
        limit = self.engine.engine.config.max_waiting_requests
        if limit and len(job.windows) > limit:
            raise InvalidRequestError(
                f"the audio is cut into {len(job.windows)} windows of at most {self.planner.prompts.max_window_s:g} s, "
                f"each one request, but this server queues at most {limit} waiting requests "
                f"(--scheduler-max-waiting-requests); send shorter audio or start the server with a larger limit",
                param="file")

    def abort(self, request_id: str) -> Any:
        return self.engine.abort(request_id)
