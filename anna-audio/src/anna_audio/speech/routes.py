"""``POST /v1/audio/speech``: OpenAI's speech endpoint (JSON in, audio out).

The body is checked (:mod:`.request`), the request tokenized and its talker prompt built in a worker thread, and
submitted to the engine (:func:`anna_core.server.fanout.open_all`), so a refusal is an HTTP error before the response
starts. ``stream_format: "audio"``: ``pcm`` and ``wav`` stream as the chunks are decoded (a streamed WAV's header
carries the largest sizes), the compressed formats are encoded whole and sent once the audio is complete, so an
engine failure is still an error status for them. ``stream_format: "sse"``: ``speech.audio.delta`` events (each
chunk's bytes in the response format, base64) and one ``speech.audio.done`` with the usage, or, when the engine fails
mid-way, an ``error`` event (``{"type": "error", "error": {...}}``) last. Every response carries
the sample rate in ``X-Sample-Rate``. A client that disconnects aborts the engine request (a compressed format's
too, while its audio is still being made). A raw ``pcm`` / ``wav`` stream that fails mid-way (the request timed
out, the server is stopping) ends early with a warning in the log; a compressed one answers an error status (503
``server_shutdown`` while stopping, 503 with ``Retry-After`` for a retryable engine failure).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

from anna_core.errors import AnnaError, InvalidRequestError
from anna_core.server.errors import (
    ClientDisconnected,
    GenerationFailed,
    ServiceUnavailableError,
    error_body,
    wait_for_disconnect,
)
from anna_core.server.fanout import merged, open_all
from anna_core.server.prepare import check_servable
from anna_core.server.request_body import json_body
from anna_core.server.sse import sse_event, sse_response
from anna_core.server.state import ServerState
from litestar import Request, Response, post
from litestar.response import Stream

from anna_audio.speech.audio_out import CHUNKED, MEDIA_TYPES, ChunkEncoder
from anna_audio.speech.request import parse_body
from anna_audio.speech.service import stream_audio

logger = logging.getLogger("anna.server")


async def _outputs(server: ServerState, opened: Any, usage: dict[str, int]) -> AsyncIterator[Any]:
    async for _, out in merged(opened, server.streams):
        usage["output_tokens"] = out.usage.completion_tokens
        yield out


async def _audio_bytes(server: ServerState, opened: Any, encoder: ChunkEncoder, usage: dict[str, int],
                       rid: str, context: Any) -> AsyncIterator[bytes]:
    """The response format's bytes as the chunks are decoded, then the encoder's tail; aborts on exit."""
    client = server.engine
    try:
        async for samples in stream_audio(_outputs(server, opened, usage), None, client.planner, client.vocoder,
                                          context):
            piece = encoder.feed(samples)
            if piece:
                yield piece
        tail = encoder.finish()
        if tail:
            yield tail
    finally:
        client.abort(rid)


async def _streamed_bytes(server: ServerState, opened: Any, encoder: ChunkEncoder, usage: dict[str, int],
                          rid: str, context: Any) -> AsyncIterator[bytes]:
    """:func:`_audio_bytes` for a raw ``pcm`` / ``wav`` stream, whose status went out with its first bytes: a failure
    mid-stream (the engine failed the request, the request timed out, the server is stopping) is logged and ends the
    stream early, not an exception in the server's response loop."""
    try:
        async for piece in _audio_bytes(server, opened, encoder, usage, rid, context):
            yield piece
    except AnnaError as exc:
        logger.warning("speech stream %s ended early: %s", rid, exc)


async def _whole(request: Request, server: ServerState, pieces: AsyncIterator[bytes], rid: str) -> bytes:
    """A compressed format's bytes, joined once the audio is complete; the engine request is aborted if the client
    disconnects first.

    Raises:
        ClientDisconnected: the client went away.
        GenerationFailed: the engine failed the request (503 for a retryable code), or the vocoder a chunk.
        ServiceUnavailableError: the server is stopping (503 ``server_shutdown``).
    """

    async def join() -> bytes:
        return b"".join([piece async for piece in pieces])

    work, gone = asyncio.ensure_future(join()), asyncio.ensure_future(wait_for_disconnect(request))
    try:
        await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
        if not work.done():
            work.cancel()
            await asyncio.gather(work, return_exceptions=True)
            raise ClientDisconnected(rid)
        return work.result()
    except (GenerationFailed, ServiceUnavailableError, InvalidRequestError):
        raise
    except AnnaError as exc:
        raise GenerationFailed(str(exc)) from exc
    finally:
        gone.cancel()
        if not work.done():  # the handler itself was cancelled (e.g. a shutdown's drain ran out)
            work.cancel()
        server.engine.abort(rid)


async def _sse_events(server: ServerState, opened: Any, encoder: ChunkEncoder, usage: dict[str, int],
                      rid: str, context: Any) -> AsyncIterator[bytes]:
    try:
        async for piece in _audio_bytes(server, opened, encoder, usage, rid, context):
            yield sse_event({"type": "speech.audio.delta", "audio": base64.b64encode(piece).decode()})
        usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
        yield sse_event({"type": "speech.audio.done", "usage": dict(usage)})
    except AnnaError as exc:
        kind = "invalid_request_error" if isinstance(exc, InvalidRequestError) else "server_error"
        # typed like the other events (OpenAI's streamed error events: ``type`` "error" beside the error object)
        yield sse_event({"type": "error", **error_body(str(exc), kind, None, getattr(exc, "code", None))})


@post("/v1/audio/speech", status_code=200)
async def speech(request: Request, server: ServerState) -> Response | Stream:
    """OpenAI speech synthesis: ``mp3``, ``opus``, ``wav``, ``flac`` or ``pcm`` (24 kHz, 16-bit mono);
    ``stream_format: "sse"`` for events."""
    body = parse_body(await json_body(request))
    if body.unknown_fields:
        server.warn_unknown_fields(list(body.unknown_fields), "/v1/audio/speech")
    check_servable(server, body.model or None)
    client = server.engine
    job = await asyncio.to_thread(client.planner.prepare, body.voice, max_frames=body.max_frames,
                                  ignore_eos=body.ignore_eos)
    rid = f"speech-{uuid.uuid4().hex}"
    r = job.request
    opened = await open_all(client.engine, [(rid, r.prompt_ids, r.params)], [r.multimodal])
    rate = client.planner.sample_rate
    headers = {"X-Sample-Rate": str(rate)}
    usage = {"input_tokens": len(r.prompt_ids), "output_tokens": 0}
    encoder = ChunkEncoder(rate, body.response_format)
    if body.stream_format == "sse":
        response = sse_response(_sse_events(server, opened, encoder, usage, rid, job.context))
        response.headers.update(headers)
        return response
    media_type = MEDIA_TYPES[body.response_format]
    if body.response_format in CHUNKED:
        return Stream(_streamed_bytes(server, opened, encoder, usage, rid, job.context), media_type=media_type,
                      headers=headers)
    data = await _whole(request, server, _audio_bytes(server, opened, encoder, usage, rid, job.context), rid)
    return Response(data, media_type=media_type, headers=headers)


ROUTES = [speech]
