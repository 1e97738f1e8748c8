"""OpenAI text routes of the ``generate`` task: ``POST /v1/chat/completions``, ``POST /v1/completions``
(``GET /v1/models`` is in :mod:`anna_core.server.routes_models`, served for every task).

Each handler parses the body (:mod:`anna_core.server.protocol`), prepares prompt ids,
:class:`SamplingParams`, parsers and grammars (:mod:`anna_core.server.prepare`) -- every
validation error is raised before any response starts, so it reaches the client as a 400 --
then submits one engine request per choice (:mod:`anna_core.server.fanout`) and turns the outputs
into choices (:mod:`anna_core.server.choices`). A client that disconnects aborts its engine
requests, streaming or not.

Everything between the decoded body and the engine submission -- field validation (tool schemas
are converted by xgrammar), chat-template rendering, tokenization, grammar set-up -- is CPU work
bounded by :mod:`anna_core.server.limits` and runs in a worker thread (``asyncio.to_thread``), so
the event loop keeps answering (``/healthz``, other streams) meanwhile. When the server stops
before a response finishes (:mod:`anna_core.server.shutdown`), a stream ends with an error event
and ``[DONE]``, a non-streamed request with a 503.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import attrs
from litestar import Request, Response, post

from anna_core.engine.outputs import RequestOutput
from anna_core.engine.sampling_params import SamplingParams
from anna_core.errors import AnnaError, InvalidRequestError
from anna_core.multimodal import MultiModalInputs
from anna_core.server import prepare, protocol, responses
from anna_core.server.choices import ChatChoice, CompletionChoice
from anna_core.server.errors import ClientDisconnected, GenerationFailed, error_body, wait_for_disconnect
from anna_core.server.fanout import Opened, merged, open_all
from anna_core.server.request_body import json_body
from anna_core.server.shutdown import ServerStopping
from anna_core.server.sse import DONE, sse_event, sse_response
from anna_core.server.state import ServerState

logger = logging.getLogger("anna.server")


async def _abort(server: ServerState, request_id: str) -> None:
    try:
        result = server.engine.abort(request_id)
        if inspect.isawaitable(result):
            await result
    except Exception:  # aborting a finished request must never mask the real outcome
        logger.debug("abort of %s failed", request_id, exc_info=True)


def _retry_after_s(server: ServerState) -> int:
    """The engine's ``Retry-After`` estimate (1 when it has none)."""
    try:
        return int(server.engine.stats().get("retry_after_s") or 1)
    except Exception:  # a stand-in engine without stats: the estimate is only a hint
        return 1


def _failed(out: RequestOutput | None) -> str | None:
    if out is None:
        return "generation failed: the engine returned nothing"
    if out.finish_reason == "error":
        return f"generation failed: {out.error}"
    return None


class _Run:
    """The engine requests of one HTTP request: ids, which finished, and their final outputs."""

    def __init__(self, server: ServerState, base_id: str, jobs: list[tuple[list[int], SamplingParams]], n: int,
                 multimodal: MultiModalInputs | None = None, *, echo_only: bool = False):
        self.server = server
        self.n = n
        self.echo_only = echo_only  # a completions echo with max_tokens 0: the one token computed is not counted
        self.multimodal = multimodal  # the media of the prompt (a chat request's images), shared by its choices
        self.ids = [base_id if len(jobs) == 1 else f"{base_id}-{i}" for i in range(len(jobs))]
        self.jobs = [(rid, ids, params) for rid, (ids, params) in zip(self.ids, jobs)]
        self.final: list[RequestOutput | None] = [None] * len(jobs)
        self.opened: Opened = []

    async def open(self) -> None:
        self.opened = await open_all(self.server.engine, self.jobs, self.multimodal)

    async def outputs(self) -> AsyncIterator[tuple[int, RequestOutput]]:
        async for i, out in merged(self.opened, self.server.streams):
            if out.finished:
                self.final[i] = out
            yield i, out

    async def abort_unfinished(self) -> None:
        for rid, final in zip(self.ids, self.final):
            if final is None:
                await _abort(self.server, rid)

    def usage(self) -> dict[str, Any]:
        """Token counts: each prompt once, every choice's completion."""
        firsts = range(0, len(self.jobs), self.n)
        prompt = sum(len(self.jobs[i][1]) for i in firsts)
        completion = 0 if self.echo_only else sum(f.usage.completion_tokens or len(f.token_ids)
                                                  for f in self.final if f is not None)
        cached = sum(self.final[i].num_cached_tokens for i in firsts if self.final[i] is not None)
        return responses.usage_body(prompt, completion, cached)


async def _collect(run: _Run, request: Request, on_output: Callable[[int, RequestOutput], Any]) -> None:
    """Run every request to its end; abort them all if the client disconnects first.

    Raises:
        ClientDisconnected: the client went away (the engine requests were aborted).
        GenerationFailed: the engine reported an error.
    """

    async def consume() -> None:
        async for i, out in run.outputs():
            on_output(i, out)

    work = asyncio.ensure_future(consume())
    disconnect = asyncio.ensure_future(wait_for_disconnect(request))
    try:
        await asyncio.wait({work, disconnect}, return_when=asyncio.FIRST_COMPLETED)
        if not work.done():
            work.cancel()
            await asyncio.gather(work, return_exceptions=True)
            await run.abort_unfinished()
            raise ClientDisconnected(",".join(run.ids))
        try:
            work.result()
        except ServerStopping:
            await run.abort_unfinished()
            raise
    finally:
        disconnect.cancel()
        if not work.done():
            work.cancel()
    for out in run.final:
        message = _failed(out)
        if message:
            raise GenerationFailed(message, code=out.error_code if out is not None else None,
                                   retry_after_s=_retry_after_s(run.server))


async def _stream(run: _Run, head: list[bytes], on_output: Callable[[int, RequestOutput], list[dict[str, Any]]],
                  frame: Callable[[list[dict[str, Any]]], bytes],
                  usage_frame: Callable[[dict[str, Any]], bytes] | None) -> AsyncIterator[bytes]:
    """SSE frames; aborts unfinished engine requests if the stream is cut."""
    try:
        for h in head:
            yield h
        async for i, out in run.outputs():
            message = _failed(out) if out.finished else None
            if message:
                yield sse_event(error_body(message, "server_error", None, out.error_code))
                yield DONE
                return
            for choices in on_output(i, out):
                yield frame(choices)
        if usage_frame is not None:
            yield usage_frame(run.usage())
        yield DONE
    except AnnaError as exc:
        kind = "invalid_request_error" if isinstance(exc, InvalidRequestError) else "server_error"
        yield sse_event(error_body(str(exc), kind, None, getattr(exc, "code", None)))
        yield DONE
    finally:
        await run.abort_unfinished()


def _chat_choices(server: ServerState, req: protocol.ChatCompletionRequest,
                  prompt_ids: list[int], params: SamplingParams) -> tuple[list[ChatChoice], SamplingParams]:
    tool_parsers = [prepare.new_tool_parser(server, req) for _ in range(req.n)]
    start_tag = getattr(tool_parsers[0], "start_tag", "")
    tags = (start_tag,) if start_tag else ()  # a call's opening markup ends unterminated reasoning
    reasoners = [prepare.new_reasoning_parser(server, prompt_ids, tags) for _ in range(req.n)]
    structured = prepare.chat_structured(req, tool_parsers[0], reasoners[0])
    if structured is not None:
        params = attrs.evolve(params, structured=structured)
    elif tool_parsers[0] is not None and not req.tools.parallel:
        params = prepare.stop_after_first_call(server, tool_parsers[0], params)
    token_text = responses.TokenText(server.tokenizer) if params.logprobs is not None else None
    choices = [ChatChoice(i, reasoning=reasoners[i], split_reasoning=server.reasoning_format != "none",
                          tool_parser=tool_parsers[i], tools=req.tools, include_reasoning=req.include_reasoning,
                          token_text=token_text) for i in range(req.n)]
    return choices, params


def _plan_chat(server: ServerState, body: Any) -> tuple[protocol.ChatCompletionRequest, list[int],
                                                        MultiModalInputs | None, SamplingParams, list[ChatChoice]]:
    """Validate a chat body and prepare its prompt (its images fetched and prepared), parameters and choices (CPU
    and network work: run in a thread).

    Raises:
        InvalidRequestError / ModelNotFoundError / ServiceUnavailableError: see :mod:`prepare`.
    """
    req = protocol.ChatCompletionRequest.from_json(body)
    server.warn_unknown_fields(list(req.unknown_fields), "/v1/chat/completions")
    if req.stream and req.prompt_logprobs is not None:
        raise InvalidRequestError("'prompt_logprobs' is not supported with 'stream' on chat completions (use a "
                                  "non-streamed request, or /v1/completions)", param="prompt_logprobs")
    prepare.check_servable(server, req.model)
    prepare.check_queue_room(server, req.n, req.n)
    prepare.check_media(server, req)
    prompt_ids, multimodal = prepare.chat_media(server, req, prepare.chat_prompt_ids(server, req))
    prompt_ids = prepare.truncate_prompt(server, prompt_ids, req.truncate_prompt_tokens, has_media=multimodal is not None)
    max_tokens = prepare.resolve_max_tokens(server, req.max_tokens, len(prompt_ids), "messages")
    params = prepare.sampling_params(server, req.sampling, max_tokens)
    choices, params = _chat_choices(server, req, prompt_ids, params)
    return req, prompt_ids, multimodal, params, choices


@post("/v1/chat/completions", status_code=200)
async def chat_completions(request: Request, server: ServerState) -> Response:
    """OpenAI chat completions, streamed (SSE) or not."""
    req, prompt_ids, mm, params, choices = await asyncio.to_thread(_plan_chat, server, await json_body(request))
    request_id, created, model = f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), server.model_name
    run = _Run(server, request_id, [(prompt_ids, p) for p in prepare.choice_params(params, req.n)], req.n, mm)
    await run.open()

    if req.stream:
        inc = req.include_usage

        def frame(chunk_choices: list[dict[str, Any]]) -> bytes:
            return sse_event(responses.chat_chunk(request_id, created, model, chunk_choices, include_usage=inc))

        def on_output(i: int, out: RequestOutput) -> list[list[dict[str, Any]]]:
            frames = []
            delta = choices[i].push(out)
            if delta is not None:
                frames.append([delta])
            if out.finished:
                reason = choices[i].finish_reason(out.finish_reason)
                frames.append([responses.chat_delta_choice(i, {}, reason)])
            return frames

        head = [frame([responses.chat_delta_choice(i, {"role": "assistant", "content": ""})]) for i in range(req.n)]
        usage_frame = (lambda usage: sse_event(responses.chat_chunk(request_id, created, model, [], usage=usage,
                                                                     include_usage=True))) if inc else None
        return sse_response(_stream(run, head, on_output, frame, usage_frame))
    await _collect(run, request, lambda i, out: choices[i].collect(out))
    body = [c.message_choice(run.final[c.index]) for c in choices]
    prompt_lp = None
    if req.prompt_logprobs is not None and run.final[0].prompt_logprobs is not None:
        prompt_lp = responses.vllm_prompt_logprobs(run.final[0].prompt_logprobs, responses.TokenText(server.tokenizer),
                                                   req.prompt_logprobs)
    return Response(responses.chat_completion_body(request_id, created, model, body, run.usage(), prompt_lp))


def _plan_completions(server: ServerState, body: Any) -> tuple[protocol.CompletionRequest,
                                                               list[tuple[list[int], SamplingParams]],
                                                               list[CompletionChoice]]:
    """Validate a completions body and prepare its prompts, parameters and choices (CPU work: run
    in a thread).

    Raises:
        InvalidRequestError / ModelNotFoundError / ServiceUnavailableError: see :mod:`prepare`.
    """
    req = protocol.CompletionRequest.from_json(body)
    server.warn_unknown_fields(list(req.unknown_fields), "/v1/completions")
    prepare.check_servable(server, req.model)
    prepare.check_queue_room(server, len(req.prompts) * req.n, req.n)
    jobs, choices = [], []
    for prompt in req.prompts:
        whole = prepare.completion_prompt_ids(server, prompt, req.truncate_prompt_tokens)
        ids = prepare.truncate_prompt(server, whole, req.truncate_prompt_tokens)
        max_tokens = prepare.resolve_max_tokens(server, req.max_tokens, len(ids), "prompt")
        params = prepare.sampling_params(server, req.sampling, max_tokens)
        if req.structured is not None:
            params = attrs.evolve(params, structured=req.structured)
        prefix = ""
        if req.echo:
            prefix = prompt if isinstance(prompt, str) and ids is whole else prepare.need_tokenizer(
                server, "echo").decode(ids, skip_special_tokens=False)  # (a truncated prompt echoes what was kept)
        wants_text = params.logprobs is not None or params.prompt_logprobs is not None
        token_text = responses.TokenText(server.tokenizer) if wants_text else None
        return_ids = req.return_token_ids or server.tokenizer is None  # no tokenizer: ids are the output
        for p in prepare.choice_params(params, req.n):
            choices.append(CompletionChoice(len(jobs), prefix, token_text, return_ids, echo_logprobs=req.echo_logprobs,
                                            prompt_logprobs=req.prompt_logprobs, echo_only=req.echo_only))
            jobs.append((ids, p))
    return req, jobs, choices


@post("/v1/completions", status_code=200)
async def completions(request: Request, server: ServerState) -> Response:
    """OpenAI (legacy) text completions, streamed (SSE) or not; several prompts and ``n`` give
    ``len(prompts) * n`` choices (choice ``i * n + j``)."""
    req, jobs, choices = await asyncio.to_thread(_plan_completions, server, await json_body(request))
    request_id, created, model = f"cmpl-{uuid.uuid4().hex}", int(time.time()), server.model_name
    run = _Run(server, request_id, jobs, req.n, echo_only=req.echo_only)
    await run.open()

    if req.stream:
        inc = req.include_usage

        def frame(chunk_choices: list[dict[str, Any]]) -> bytes:
            return sse_event(responses.completion_chunk(request_id, created, model, chunk_choices, include_usage=inc))

        def on_output(i: int, out: RequestOutput) -> list[list[dict[str, Any]]]:
            frames = []
            piece = choices[i].push(out)
            if piece is not None:
                frames.append([piece])
            if out.finished:
                frames.append([responses.completion_choice(i, "", "length" if req.echo_only else out.finish_reason)])
            return frames

        usage_frame = (lambda usage: sse_event(responses.completion_chunk(
            request_id, created, model, [], usage=usage, include_usage=True))) if inc else None
        return sse_response(_stream(run, [], on_output, frame, usage_frame))
    await _collect(run, request, lambda i, out: choices[i].collect(out))
    body = [c.final_choice(run.final[c.index]) for c in choices]
    return Response(responses.completion_body(request_id, created, model, body, run.usage()))


ROUTES = [chat_completions, completions]
