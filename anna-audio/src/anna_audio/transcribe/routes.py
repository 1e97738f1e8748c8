"""``POST /v1/audio/transcriptions``: OpenAI's transcription endpoint (multipart form in, a transcript out).

The body is read through litestar's multipart parser under :data:`MAX_FORM_BYTES` (counted while it arrives: a
larger body is a 413 before it is all read); the form is checked (:mod:`.request`), the audio decoded and windowed
in a worker thread (:meth:`TranscriptionPlanner.prepare`; at most ``ServerState.media_slots`` uploads at once, a 429
past them), and every window submitted as its own engine request
(:func:`anna_core.server.fanout.open_all`), so an engine refusal is an HTTP error before the response starts.
Non-streamed: the windows' outputs are assembled and rendered in the asked ``response_format``. Streamed
(``stream=true``): ``transcript.text.delta`` events with the text as it is produced, in window order, then one
``transcript.text.done`` with the whole text. A client that disconnects aborts the windows' engine requests.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

from anna_core.errors import AnnaError, InvalidRequestError, QueueFullError
from anna_core.server.errors import ClientDisconnected, GenerationFailed, error_body, wait_for_disconnect
from anna_core.server.fanout import merged, open_all
from anna_core.server.prepare import check_servable
from anna_core.server.sse import sse_event, sse_response
from anna_core.server.state import ServerState
from litestar import Request, Response, post
from litestar.datastructures import UploadFile
from litestar.exceptions import ClientException

from anna_audio.audio_io import AudioLimits
from anna_audio.transcribe import formats
from anna_audio.transcribe.request import parse_form

logger = logging.getLogger("anna.server")

MAX_FORM_BYTES = AudioLimits().max_bytes + 1024 * 1024
"""Bytes of a whole transcription form: the default upload cap plus 1 MiB for the other fields and the part
headers (the upload itself is then held to the server's ``AudioLimits.max_bytes``)."""

FORM_MEDIA_TYPES = ("multipart/form-data", "application/x-www-form-urlencoded")
"""The bodies read as a form (a urlencoded one carries no file, so it is refused for that)."""


async def _read_form(request: Request) -> tuple[dict[str, list[Any]], bytes | None]:
    """The form's fields by name (the ``file`` part left out) and the ``file`` part's bytes (None: no file part).

    Raises:
        InvalidRequestError: a body that is not a form (``multipart/form-data`` or urlencoded), a part without a
            filename that is not UTF-8 (``param`` ``file``: an upload whose filename is empty), more than one
            ``file`` part, or a ``file`` field that is text.
    """
    media_type = request.content_type[0].lower()
    if media_type not in FORM_MEDIA_TYPES:
        raise InvalidRequestError(f"the request body must be multipart/form-data (the audio as a file part named "
                                  f"'file'), not {media_type or 'a body without a Content-Type'}",
                                  param=None)
    try:
        form = await request.form()
    except ClientException as exc:  # litestar's parser: its part limit, or a malformed body
        if exc.status_code != 400:  # (a body over the size limit stays a 413)
            raise
        reason = ("it has more parts than the server reads (1000), or a part's headers exceed the parser's limits "
                  "(8 headers, 4 KiB a line)" if "Too Large" in str(exc.detail)
                  else f"it cannot be parsed ({exc.detail})")
        raise InvalidRequestError(f"the multipart/form-data body is refused: {reason}", param=None) from None
    except UnicodeDecodeError:  # a part without a filename (or with an empty one) is read as text
        raise InvalidRequestError("a form part without a filename is not UTF-8 text: send the audio as a file part "
                                  "named 'file' with a non-empty filename (a part whose filename is empty is read as "
                                  "a text field)", param="file") from None
    items = list(form.multi_items())
    try:
        fields: dict[str, list[Any]] = {}
        for key, value in items:
            if key != "file":
                fields.setdefault(key, []).append(value)
        files = [value for key, value in items if key == "file"]
        if len(files) > 1:
            raise InvalidRequestError("the form has more than one 'file' part", param="file")
        if files and not isinstance(files[0], UploadFile):
            raise InvalidRequestError("'file' must be a file part (with a filename), not a text field", param="file")
        return fields, (await files[0].read() if files else None)
    finally:
        for _, value in items:
            if isinstance(value, UploadFile):
                await value.close()


def _prepare(server: ServerState, req: Any) -> Any:
    """Decode and window the upload (CPU work, in a worker thread), holding one of the server's media slots.

    Raises:
        QueueFullError: every media slot is taken (429): uploads are bounded, never queued.
        InvalidRequestError: see :meth:`~anna_audio.transcribe.service.TranscriptionPlanner.prepare`; more windows
            than the engine's waiting queue holds.
    """
    if not server.media_slots.acquire(blocking=False):
        raise QueueFullError("too many uploads are being decoded at once; retry shortly", retry_after_s=1)
    try:
        job = server.engine.planner.prepare(req)
        server.engine.check_room(job)
        return job
    finally:
        server.media_slots.release()


def _failed_message(out: Any) -> str | None:
    if out is None:
        return "transcription failed: the engine returned nothing"
    if out.finish_reason == "error":
        return f"transcription failed: {out.error}"
    return None


async def _abort_all(client: Any, ids: list[str]) -> None:
    for rid in ids:
        try:
            client.abort(rid)
        except Exception:  # aborting a finished request must never mask the outcome
            logger.debug("abort of %s failed", rid, exc_info=True)


async def _collect(server: ServerState, request: Request, opened: Any, ids: list[str]) -> list[Any]:
    """Every window's final output; aborts them all if the client disconnects first.

    Raises:
        ClientDisconnected: the client went away.
        GenerationFailed: a window failed in the engine.
        ServerStopping: the server stopped first.
    """
    finals: list[Any] = [None] * len(ids)

    async def consume() -> None:
        async for i, out in merged(opened, server.streams):
            if out.finished:
                finals[i] = out

    work = asyncio.ensure_future(consume())
    disconnect = asyncio.ensure_future(wait_for_disconnect(request))
    try:
        await asyncio.wait({work, disconnect}, return_when=asyncio.FIRST_COMPLETED)
        if not work.done():
            work.cancel()
            await asyncio.gather(work, return_exceptions=True)
            raise ClientDisconnected(",".join(ids))
        work.result()
    finally:
        disconnect.cancel()
        if not work.done():
            work.cancel()
        await _abort_all(server.engine, [rid for rid, f in zip(ids, finals) if f is None])
    for out in finals:
        message = _failed_message(out)
        if message:
            raise GenerationFailed(message, code=out.error_code if out is not None else None)
    return finals


async def _stream_events(server: ServerState, job: Any, opened: Any, ids: list[str]) -> AsyncIterator[bytes]:
    """``transcript.text.delta`` events, then ``transcript.text.done`` (an ``error`` event if a window fails)."""
    client = server.engine
    text = ""
    failed: list[str] = []

    async def outputs() -> AsyncIterator[tuple[int, Any]]:
        async for i, out in merged(opened, server.streams):
            message = _failed_message(out) if out.finished else None
            if message:
                failed.append(message)
                return
            yield i, out

    try:
        async for delta in client.planner.deltas(job, outputs()):
            text += delta
            yield sse_event({"type": "transcript.text.delta", "delta": delta})
        if failed:
            yield sse_event(error_body(failed[0], "server_error"))
            return
        yield sse_event({"type": "transcript.text.done", "text": text,
                         "usage": formats.usage(job.audio.duration_s)})
    except AnnaError as exc:
        kind = "invalid_request_error" if isinstance(exc, InvalidRequestError) else "server_error"
        yield sse_event(error_body(str(exc), kind, None, getattr(exc, "code", None)))
    finally:
        await _abort_all(client, ids)


@post("/v1/audio/transcriptions", status_code=200, request_max_body_size=MAX_FORM_BYTES)
async def transcriptions(request: Request, server: ServerState) -> Response:
    """OpenAI audio transcription: ``json``, ``text``, ``verbose_json``, ``srt`` or ``vtt``; streamed as
    transcript events with ``stream=true``."""
    fields, audio = await _read_form(request)
    req = parse_form(fields, audio)
    if req.unknown_fields:
        server.warn_unknown_fields(list(req.unknown_fields), "/v1/audio/transcriptions")
    check_servable(server, req.model or None)
    client = server.engine
    job = await asyncio.to_thread(_prepare, server, req)
    request_id = f"trsc-{uuid.uuid4().hex}"
    jobs, media = client.planner.engine_jobs(job, request_id)
    ids = [rid for rid, _, _ in jobs]
    opened = await open_all(client.engine, jobs, media)
    if req.stream:
        return sse_response(_stream_events(server, job, opened, ids))
    finals = await _collect(server, request, opened, ids)
    transcript = await asyncio.to_thread(client.planner.assemble, job, [f.text for f in finals])
    body = formats.render(transcript, req.response_format, temperature=req.temperature,
                          granularities=req.granularities)
    if isinstance(body, str):
        return Response(body, media_type=formats.TEXT_FORMATS[req.response_format])
    return Response(body)


ROUTES = [transcriptions]
