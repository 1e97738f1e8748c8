"""The ``speech`` task's request path: words -> an engine request over the talker -> code frames -> audio chunks.

:class:`SpeechPlanner` checks and tokenizes a request and builds the talker prompt (CPU work); the engine generates
codebook 0 and the code predictor the rest (:mod:`anna_audio.qwen3_tts.talker_lm`); :class:`FrameChunker` cuts the
frames into chunks as they arrive (a short first chunk for an early first audio, then longer ones) and the shared
:class:`~anna_audio.speech.vocoder.Vocoder` decodes them, batched across requests, each continuing its request's
stream. :class:`SpeechService` is the server's client; :func:`synthesize` runs one request on the caller's thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import Future
from typing import Any

import attrs
import numpy as np
import torch
from anna_core.errors import AnnaError, InvalidRequestError
from anna_core.server.errors import GenerationFailed

from anna_audio.qwen3_tts.engine_requests import (
    EngineSpeechRequest,
    FrameAssembler,
    engine_request,
    request_key,
    talker_params,
)
from anna_audio.qwen3_tts.loader import SpeechParts
from anna_audio.qwen3_tts.prompt import build_prompt
from anna_audio.qwen3_tts.sampling import SpeechSampling
from anna_audio.qwen3_tts.stream_state import StreamState
from anna_audio.qwen3_tts.voice import VoiceRequest, speech_request
from anna_audio.speech.vocoder import Vocoder

log = logging.getLogger("anna.speech")


@attrs.frozen
class ChunkPolicy:
    """Frames per decoded chunk: ``first`` for a request's first chunk (its first audio), ``rest`` after."""

    first: int = 1
    rest: int = 8

    def __attrs_post_init__(self) -> None:
        if self.first < 1 or self.rest < 1:
            raise ValueError(f"chunk sizes must be at least one frame, got {self.first} and {self.rest}")

    def lengths(self) -> list[int]:
        """Every chunk length a request can decode: ``first``, ``rest``, and the shorter remainder a request ends
        with (``1 .. max(first, rest)``)."""
        return list(range(1, max(self.first, self.rest) + 1))


class FrameChunker:
    """Frames in as they come, chunks ``[T, G]`` out in order (see :class:`ChunkPolicy`); :meth:`flush` gives the
    remainder at the end."""

    def __init__(self, policy: ChunkPolicy):
        self.policy = policy
        self.pending: list[torch.Tensor] = []
        self.chunks = 0

    def push(self, frames: list[torch.Tensor]) -> list[torch.Tensor]:
        self.pending += frames
        ready = []
        while True:
            size = self.policy.first if self.chunks == 0 else self.policy.rest
            if len(self.pending) < size:
                return ready
            ready.append(torch.stack(self.pending[:size]))
            self.pending = self.pending[size:]
            self.chunks += 1

    def flush(self) -> torch.Tensor | None:
        if not self.pending:
            return None
        chunk, self.pending = torch.stack(self.pending), []
        self.chunks += 1
        return chunk


@attrs.frozen
class SpeechJob:
    """A prepared request: its engine request, the frame count it stops at (None: EOS or the checkpoint's limit), and
    ``context`` ``[F, G]``: codes the audio continues (in-context cloning's reference codes: decoded first, their
    samples dropped, as the reference cuts them off), or None."""

    request: EngineSpeechRequest
    max_frames: int | None
    context: torch.Tensor | None = None


class SpeechPlanner:
    """Prepares synthesis requests for the engine.

    Args:
        parts: the checkpoint's :class:`~anna_audio.qwen3_tts.loader.SpeechParts`.
        placeholder_id: the engine talker's prompt placeholder (``TalkerLM.placeholder_id``).
        sampling: the talker's sampling (default: the checkpoint's ``generation_config.json``).
        chunks: how frames are cut into decoded chunks.
        max_trailing: the most trailing text embeddings a prompt may carry (``TalkerLM.max_trailing``; None: no
            limit).
        max_prompt_tokens: the most embeddings a talker prompt may hold (the engine's per-item encoder budget and
            its context less one frame; None: no limit), checked here so that a long ``input`` / ``instructions`` is
            refused naming them.
    """

    def __init__(self, parts: SpeechParts, placeholder_id: int, *, sampling: SpeechSampling | None = None,
                 chunks: ChunkPolicy | None = None, max_trailing: int | None = None,
                 max_prompt_tokens: int | None = None):
        self.parts = parts
        self.placeholder_id = placeholder_id
        self.max_trailing = max_trailing
        self.max_prompt_tokens = max_prompt_tokens
        self.sampling = sampling or parts.sampling
        self.chunks = chunks or ChunkPolicy()

    @property
    def sample_rate(self) -> int:
        return self.parts.sample_rate

    def prepare(self, request: VoiceRequest, *, max_frames: int | None = None, ignore_eos: bool = False,
                seed: int | None = None) -> SpeechJob:
        """Check, tokenize and embed ``request`` (CPU / device work: run it in a worker thread).

        Args:
            max_frames: stop after this many frames (None: at EOS or the checkpoint's ``max_new_tokens``).
            ignore_eos: never stop at EOS (with ``max_frames``: a fixed length, for benchmarks).
            seed: the talker's sampling seed (None: random).

        Raises:
            InvalidRequestError: see :func:`~anna_audio.qwen3_tts.voice.speech_request`; a checkpoint loaded without
                a tokenizer; ``max_frames < 1``.
        """
        if self.parts.tokenizer is None:
            raise InvalidRequestError("this model was loaded without a tokenizer (dummy weights): it cannot read text",
                                      param="input")
        if max_frames is not None and max_frames < 1:
            raise InvalidRequestError(f"max_frames must be at least 1, got {max_frames}", param="max_frames")
        words = speech_request(self.parts.config, self.parts.tokenizer, request, self.parts.cloner)
        return self.prepare_tokens(words, max_frames=max_frames, ignore_eos=ignore_eos, seed=seed)

    def prepare_tokens(self, words: Any, *, max_frames: int | None = None, ignore_eos: bool = False,
                       seed: int | None = None) -> SpeechJob:
        """:meth:`prepare` from a tokenized :class:`~anna_audio.qwen3_tts.prompt.SpeechRequest` (no text checks).

        Raises:
            InvalidRequestError: a streamed text longer than ``max_trailing`` embeddings, or a prompt longer than
                ``max_prompt_tokens``.
        """
        parts = self.parts
        with torch.inference_mode():
            prompt = build_prompt(parts.config, parts.talker, parts.predictor, words)
        if self.max_trailing is not None and prompt.trailing.shape[0] > self.max_trailing:
            raise InvalidRequestError(f"the text is {prompt.trailing.shape[0] - 1} tokens; this model streams at most "
                                      f"{self.max_trailing - 1} text tokens beside the audio", param="input")
        params = talker_params(self.sampling, max_frames=max_frames, ignore_eos=ignore_eos, seed=seed)
        request = engine_request(prompt, self.placeholder_id, params, request_key(words))
        if self.max_prompt_tokens is not None and len(request.prompt_ids) > self.max_prompt_tokens:
            raise InvalidRequestError(f"the input and instructions make a prompt of {len(request.prompt_ids)} tokens; "
                                      f"this server takes at most {self.max_prompt_tokens}", param="input")
        return SpeechJob(request, max_frames, words.ref_codes)


def _failed(out: Any) -> None:
    """Raise GenerationFailed (its ``code``: the output's ``error_code``, so a retryable failure is a 503) when the
    engine failed the request."""
    if out.finish_reason == "error":
        raise GenerationFailed(f"speech synthesis failed: {out.error}", code=out.error_code)


async def _samples(future: Future) -> np.ndarray:
    """A vocoder chunk's samples; its failure (e.g. a code outside the codebook, the vocoder's last line of defence
    against a talker bug) logged and raised as :class:`AnnaError`, which a route turns into an error response (an
    SSE error event mid-stream) instead of an unhandled exception that drops the connection."""
    try:
        return await asyncio.wrap_future(future)
    except Exception as exc:
        log.error("the vocoder failed a speech request's chunk: %s: %s", type(exc).__name__, exc)
        raise AnnaError(f"speech synthesis failed: the vocoder refused a chunk: {exc}") from exc


def synthesize(engine: Any, planner: SpeechPlanner, vocoder: Vocoder, job: SpeechJob,
               request_id: str = "speech") -> Iterator[np.ndarray]:
    """Run one job on this thread over a synchronous engine (not running elsewhere), yielding its audio chunks
    (float32 samples) as they are decoded.

    Raises:
        AnnaError: the engine failed the request.
    """
    r = job.request
    engine.add_request(request_id, r.prompt_ids, r.params, multimodal=r.multimodal)
    frames, chunker, state = FrameAssembler(), FrameChunker(planner.chunks), StreamState()
    if job.context is not None:
        vocoder.decode(state, job.context).result()  # the reference's codes: context, not output
    while engine.has_unfinished():
        for out in engine.step():
            if out.request_id != request_id:
                continue
            _failed(out)
            for chunk in chunker.push(frames.feed(out)):
                yield vocoder.decode(state, chunk).result()
    rest = chunker.flush()
    if rest is not None:
        yield vocoder.decode(state, rest).result()


async def stream_audio(outputs: AsyncIterator[Any], first: Any, planner: SpeechPlanner, vocoder: Vocoder,
                       context: torch.Tensor | None = None) -> AsyncIterator[np.ndarray]:
    """One request's audio chunks (float32 samples) from its engine outputs (``first``, then ``outputs``), decoded
    as the frames arrive (after ``context``, :attr:`SpeechJob.context`, whose samples are dropped).

    Raises:
        AnnaError: the engine failed the request, or the vocoder one of its chunks (logged).
    """
    frames, chunker, state = FrameAssembler(), FrameChunker(planner.chunks), StreamState()
    if context is not None:
        await _samples(vocoder.decode(state, context))

    async def every() -> AsyncIterator[Any]:
        if first is not None:
            yield first
        async for out in outputs:
            yield out

    async for out in every():
        _failed(out)
        for chunk in chunker.push(frames.feed(out)):
            yield await _samples(vocoder.decode(state, chunk))
    rest = chunker.flush()
    if rest is not None:
        yield await _samples(vocoder.decode(state, rest))


class SpeechService:
    """The ``speech`` task's client (``server.engine`` of a speech server).

    Args:
        engine: the running :class:`~anna_core.engine.async_engine.AsyncEngine` over the talker.
        planner: the :class:`SpeechPlanner`.
        vocoder: the shared :class:`~anna_audio.speech.vocoder.Vocoder`.
    """

    def __init__(self, engine: Any, planner: SpeechPlanner, vocoder: Vocoder):
        self.engine = engine
        self.planner = planner
        self.vocoder = vocoder

    @property
    def metrics(self) -> Any:
        return self.engine.metrics

    @property
    def degraded(self) -> str | None:
        return self.engine.degraded

    def stats(self) -> dict[str, Any]:
        stats = dict(self.engine.stats())
        stats["speech"] = {"sample_rate": self.planner.sample_rate, "vocoder_calls": self.vocoder.calls,
                           "chunk_frames": [self.planner.chunks.first, self.planner.chunks.rest]}
        return stats

    async def shutdown(self, drain: bool = True) -> None:
        await self.engine.shutdown(drain)
        await asyncio.to_thread(self.vocoder.close)

    def abort(self, request_id: str) -> Any:
        return self.engine.abort(request_id)
