"""OpenAI routes: ``GET /v1/models``, ``POST /v1/chat/completions``, ``POST /v1/completions``.

Each handler parses the body (:mod:`anna_core.server.protocol`), prepares prompt ids and
:class:`SamplingParams` (:mod:`anna_core.server.prepare`) -- every validation error is raised
before any response starts, so it reaches the client as a 400 -- then talks to the engine only
through ``engine.generate(...)`` (an async iterator fed by the engine loop's queue; no polling).
A client that disconnects aborts its engine request, streaming or not.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from litestar import Request, Response, get, post

from anna_core.engine.outputs import RequestOutput
from anna_core.engine.sampling_params import SamplingParams
from anna_core.errors import AnnaError, InvalidRequestError
from anna_core.server import protocol
from anna_core.server.errors import ClientDisconnected, GenerationFailed, error_body
from anna_core.server.prepare import (
    chat_prompt_ids,
    check_servable,
    completion_prompt_ids,
    resolve_max_tokens,
    sampling_params,
)
from anna_core.server.sse import DONE, sse_event, sse_response
from anna_core.server.state import ServerState

logger = logging.getLogger("anna.server")


async def _json_body(request: Request) -> Any:
    raw = await request.body()
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidRequestError(f"the request body is not valid JSON: {exc}") from exc


async def _abort(server: ServerState, request_id: str) -> None:
    try:
        result = server.engine.abort(request_id)
        if inspect.isawaitable(result):
            await result
    except Exception:  # aborting a finished request must never mask the real outcome
        logger.debug("abort of %s failed", request_id, exc_info=True)


async def _wait_for_disconnect(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def _final_output(server: ServerState, request: Request, request_id: str, prompt_ids: list[int],
                        params: SamplingParams) -> RequestOutput:
    """Run a request to its end; abort it if the client disconnects first.

    Raises:
        ClientDisconnected: the client went away (the engine request was aborted).
        GenerationFailed: the engine reported an error.
    """

    async def consume() -> RequestOutput | None:
        final = None
        async with contextlib.aclosing(server.engine.generate(request_id, prompt_ids, params)) as outputs:
            async for out in outputs:
                final = out
        return final

    work = asyncio.ensure_future(consume())
    disconnect = asyncio.ensure_future(_wait_for_disconnect(request))
    try:
        await asyncio.wait({work, disconnect}, return_when=asyncio.FIRST_COMPLETED)
        if not work.done():
            work.cancel()
            await _abort(server, request_id)
            raise ClientDisconnected(request_id)
        final = work.result()
    finally:
        disconnect.cancel()
        if not work.done():
            work.cancel()
    if final is None or final.finish_reason == "error":
        raise GenerationFailed(f"generation failed: {final.error if final else 'the engine returned nothing'}")
    return final


async def _open_stream(server: ServerState, request_id: str, prompt_ids: list[int],
                       params: SamplingParams) -> tuple[AsyncIterator[RequestOutput], RequestOutput | None]:
    """Submit a request and wait for its first output, so that the engine refusing it (a limit,
    shutdown) still reaches the client as an HTTP error status rather than inside a 200 stream."""
    outputs = server.engine.generate(request_id, prompt_ids, params)
    try:
        first = await outputs.__anext__()
    except StopAsyncIteration:
        first = None
    except BaseException:
        await outputs.aclose()
        raise
    return outputs, first


async def _stream_events(server: ServerState, request_id: str, prompt_ids: list[int],
                         outputs: AsyncIterator[RequestOutput], first_output: RequestOutput | None,
                         head: bytes | None, delta_chunk: Callable[[str], dict[str, Any]],
                         finish_chunk: Callable[[str | None], dict[str, Any]],
                         usage_chunk: Callable[[dict[str, int]], dict[str, Any]] | None) -> AsyncIterator[bytes]:
    """SSE frames for one streamed request; aborts the engine request if the stream is cut."""

    async def all_outputs() -> AsyncIterator[RequestOutput]:
        if first_output is not None:
            yield first_output
        async for out in outputs:
            yield out

    finished = False
    try:
        if head is not None:
            yield head
        final: RequestOutput | None = None
        async with contextlib.aclosing(outputs):
            async for out in all_outputs():
                final = out
                if out.delta_text:
                    yield sse_event(delta_chunk(out.delta_text))
        finished = final is not None and final.finished
        if final is None or final.finish_reason == "error":
            message = f"generation failed: {final.error if final else 'the engine returned nothing'}"
            yield sse_event(error_body(message, "server_error"))
        else:
            yield sse_event(finish_chunk(final.finish_reason))
            if usage_chunk is not None:
                yield sse_event(usage_chunk(_usage(prompt_ids, final)))
        yield DONE
    except AnnaError as exc:
        yield sse_event(error_body(str(exc), "invalid_request_error" if isinstance(exc, InvalidRequestError)
                                   else "server_error"))
        yield DONE
    finally:
        if not finished:
            await _abort(server, request_id)


def _usage(prompt_ids: list[int], final: RequestOutput) -> dict[str, int]:
    """Token counts: the engine's own, else counted here."""
    return protocol.usage_body(final.usage.prompt_tokens or len(prompt_ids),
                               final.usage.completion_tokens or len(final.token_ids))


def _prepare(server: ServerState, req: Any, prompt_ids: list[int], prompt_param: str) -> SamplingParams:
    max_tokens = resolve_max_tokens(server, req.max_tokens, len(prompt_ids), prompt_param)
    return sampling_params(server, req.sampling, max_tokens)


@get("/v1/models", sync_to_thread=False)
def list_models(server: ServerState) -> dict[str, Any]:
    """The served model, with its ``max_model_len``."""
    return protocol.model_list_body(server.model_name, int(server.started_at), server.max_model_len)


@post("/v1/chat/completions", status_code=200)
async def chat_completions(request: Request, server: ServerState) -> Response:
    """OpenAI chat completions, streamed (SSE) or not."""
    req = protocol.ChatCompletionRequest.from_json(await _json_body(request))
    server.warn_unknown_fields(list(req.unknown_fields), "/v1/chat/completions")
    check_servable(server, req.model)
    prompt_ids = chat_prompt_ids(server, req)
    params = _prepare(server, req, prompt_ids, "messages")
    request_id, created, model = f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), server.model_name

    if req.stream:
        inc = req.include_usage

        def chunk(delta: dict[str, Any] | None, finish: str | None = None, usage: dict[str, int] | None = None):
            return protocol.chat_chunk(request_id, created, model, delta, finish, usage=usage, include_usage=inc)

        outputs, first_output = await _open_stream(server, request_id, prompt_ids, params)
        head = sse_event(chunk({"role": "assistant", "content": ""}))
        return sse_response(_stream_events(
            server, request_id, prompt_ids, outputs, first_output, head,
            delta_chunk=lambda text: chunk({"content": text}),
            finish_chunk=lambda reason: chunk({}, reason),
            usage_chunk=(lambda usage: chunk(None, None, usage)) if inc else None,
        ))
    final = await _final_output(server, request, request_id, prompt_ids, params)
    usage = _usage(prompt_ids, final)
    return Response(protocol.chat_completion_body(request_id, created, model, final.text, final.finish_reason, usage))


@post("/v1/completions", status_code=200)
async def completions(request: Request, server: ServerState) -> Response:
    """OpenAI (legacy) text completions, streamed (SSE) or not."""
    req = protocol.CompletionRequest.from_json(await _json_body(request))
    server.warn_unknown_fields(list(req.unknown_fields), "/v1/completions")
    check_servable(server, req.model)
    prompt_ids = completion_prompt_ids(server, req)
    params = _prepare(server, req, prompt_ids, "prompt")
    request_id, created, model = f"cmpl-{uuid.uuid4().hex}", int(time.time()), server.model_name

    if req.stream:
        inc = req.include_usage

        def chunk(text: str | None, finish: str | None = None, usage: dict[str, int] | None = None):
            return protocol.completion_chunk(request_id, created, model, text, finish, usage=usage, include_usage=inc)

        outputs, first_output = await _open_stream(server, request_id, prompt_ids, params)
        return sse_response(_stream_events(
            server, request_id, prompt_ids, outputs, first_output, None,
            delta_chunk=lambda text: chunk(text),
            finish_chunk=lambda reason: chunk("", reason),
            usage_chunk=(lambda usage: chunk(None, None, usage)) if inc else None,
        ))
    final = await _final_output(server, request, request_id, prompt_ids, params)
    usage = _usage(prompt_ids, final)
    return Response(protocol.completion_body(request_id, created, model, final.text, final.finish_reason, usage))


ROUTES = [list_models, chat_completions, completions]
