"""Turn a parsed OpenAI request into what the engine takes: prompt token ids and SamplingParams.

Chat prompts are rendered with the checkpoint's own chat template
(:meth:`anna_core.tokenizer.Tokenizer.apply_chat_template`, with the request's tools unless
``tool_choice`` is ``none``) and tokenized without adding special tokens (the template writes
them). Sampling fields resolve in this order: the request's own value, the server flag
(``--temperature`` ...), the checkpoint's ``generation_config.json``, the :class:`SamplingParams`
default. Each of ``n`` choices is its own engine request; with a ``seed``, choice 0 uses the seed
itself and choice ``i`` a seed derived from it, so the whole response is reproducible.
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from anna_core.engine.sampling_params import SamplingParams, StructuredOutput
from anna_core.errors import AnnaError, InvalidRequestError, QueueFullError
from anna_core.multimodal import MultiModalInputs
from anna_core.parsers.json_calls import JsonToolCallParser
from anna_core.server.errors import LOADING_RETRY_AFTER_S, ModelNotFoundError, ServiceUnavailableError
from anna_core.server.limits import MAX_CHARS_PER_TOKEN, check_prompt_chars, max_prompt_chars
from anna_core.server.protocol import ChatCompletionRequest
from anna_core.server.state import SAMPLING_DEFAULT_FIELDS, ServerState

_SEED_STEP = 0x9E3779B97F4A7C15  # golden-ratio increment: choice seeds far apart
_INT64 = 1 << 64  # choice seeds wrap within the int64 range a seed may take


def check_servable(server: ServerState, requested_model: str | None) -> None:
    """Raise unless this server can take a request for ``requested_model`` now.

    Raises:
        ServiceUnavailableError: loading, failed or draining (HTTP 503).
        ModelNotFoundError: another model was requested (HTTP 404).
    """
    if server.draining:
        raise ServiceUnavailableError("the server is shutting down and takes no new requests")
    if not server.ready:
        why = f"the model failed to load: {server.load_error}" if server.load_error else "the model is still loading"
        raise ServiceUnavailableError(f"{why}; retry when GET /health answers 200",
                                      retry_after_s=None if server.load_error else LOADING_RETRY_AFTER_S)
    if requested_model is not None and requested_model != server.model_name:
        raise ModelNotFoundError(requested_model, server.model_name)


def check_queue_room(server: ServerState, num_requests: int, n: int) -> None:
    """Refuse a request that fans out to more engine requests than the waiting queue ever holds.

    Every choice is its own engine request and all are submitted at once, so with
    ``--scheduler-max-waiting-requests L`` a request of more than ``L`` choices would be a 429
    on every retry, even on an idle server.

    Raises:
        InvalidRequestError: ``num_requests`` (``n`` per prompt) exceeds the limit (the message
            states both numbers; ``param`` is ``n``).
    """
    limit = server.max_waiting_requests
    if not limit or num_requests <= limit:
        return
    what = f"n is {n}" if num_requests == n else f"{num_requests // n} prompts with n={n} make {num_requests} choices"
    raise InvalidRequestError(
        f"{what}, but this server queues at most {limit} waiting requests (--scheduler-max-waiting-requests "
        f"{limit}) and every choice is one request, so it could never be admitted; lower n to {limit} or less, "
        "or start the server with a larger limit.", param="n")


def need_tokenizer(server: ServerState, what: str) -> Any:
    if server.tokenizer is None:
        raise InvalidRequestError(f"this model was loaded without a tokenizer, so {what} is not possible")
    return server.tokenizer


def chat_prompt_ids(server: ServerState, req: ChatCompletionRequest) -> list[int]:
    """Render the messages with the chat template and tokenize them (CPU work: call it off the
    event loop).

    Raises:
        InvalidRequestError: no tokenizer or chat template, the template rejected the messages, or
            the rendering has more characters than the context could hold
            (``context_length_exceeded``, param ``messages``; checked before tokenizing).
    """
    tokenizer = need_tokenizer(server, "chat completion")
    template_kwargs = dict(req.chat_template_kwargs)
    if "enable_thinking" not in template_kwargs and server.enable_thinking is not None:
        template_kwargs["enable_thinking"] = server.enable_thinking
    text = tokenizer.apply_chat_template(
        req.messages,
        add_generation_prompt=req.add_generation_prompt,
        continue_final_message=req.continue_final_message,
        tools=req.tools.tools if req.tools.choice != "none" and req.tools.tools else None,
        **template_kwargs,
    )
    return _encode(server, tokenizer, text, req.truncate_prompt_tokens, "messages", add_special_tokens=False)


def _encode(server: ServerState, tokenizer: Any, text: str, keep: int | None, param: str, *,
            add_special_tokens: bool) -> list[int]:
    """``text``'s token ids. Text longer than the context could hold is refused before tokenizing
    (:func:`~anna_core.server.limits.check_prompt_chars`), unless only its last ``keep`` tokens are kept
    (``truncate_prompt_tokens``; -1: the context length): then its tail of ``2 * 16 * keep`` characters is tokenized
    (more than ``keep`` tokens on any ordinary text; the whole text when the tail holds fewer) and
    :func:`truncate_prompt` keeps the last ``keep`` of them."""
    limit = max_prompt_chars(server.max_model_len)
    if keep is None or len(text) <= limit or server.max_model_len <= 0:
        check_prompt_chars(len(text), server.max_model_len, param)
        return tokenizer.encode(text, add_special_tokens=add_special_tokens)
    want = server.max_model_len if keep == -1 else min(keep, server.max_model_len)
    ids = tokenizer.encode(text[len(text) - 2 * MAX_CHARS_PER_TOKEN * want:], add_special_tokens=False)
    if len(ids) <= want:  # (a tail denser than 32 characters a token)
        ids = tokenizer.encode(text, add_special_tokens=add_special_tokens)
    return ids


def check_media(server: ServerState, req: ChatCompletionRequest) -> None:
    """Refuse media a model does not take, and more media than one request may fetch (before the chat template
    renders them).

    Raises:
        InvalidRequestError: the request has images or videos and the model's processor takes none, or more of them
            together than the media policy's ``max_media_per_request`` (param ``messages``).
    """
    taken = () if server.processor is None else server.processor.modalities
    for kind, urls in (("image", req.image_urls), ("video", req.video_urls)):
        if urls and kind not in taken:
            what = "text only" if not taken else " and ".join(f"{m}s" for m in taken) + " only"
            raise InvalidRequestError(f"this model takes {what}; the request carries {kind}s", param="messages")
    limit = server.media_fetcher.policy.max_media_per_request
    count = len(req.image_urls) + len(req.video_urls)
    if count > limit:
        raise InvalidRequestError(f"the request carries {count} images and videos; this server takes at most "
                                  f"{limit} (max_media_per_request)", param="messages")


def chat_media(server: ServerState, req: ChatCompletionRequest, prompt_ids: list[int]
               ) -> tuple[list[int], MultiModalInputs | None]:
    """Fetch, decode and prepare the images and videos of a chat request (CPU and network work: call it off the
    event loop). All media of the request share its byte budget; a video is sampled at ``fps`` keeping at most
    ``max_frames`` frames (the request's ``mm_processor_kwargs``, else the server's, else the processor's
    ``video_sampling``) within the media policy's frame-size, frame-count and decode-time caps.

    Returns:
        ``(prompt ids, None)`` for a request without media; else the ids with each medium's placeholder expanded
        and its :class:`~anna_core.multimodal.MultiModalInputs` (the model's processor).

    Raises:
        InvalidRequestError: media for a model that does not take them, a URL the media policy refuses, a body
            that is not an image or a video, an invalid ``fps`` / ``max_frames`` (or one above the model's limit),
            placeholders that do not match the media (param ``messages`` or ``mm_processor_kwargs``).
        QueueFullError: ``ServerState.media_slots`` requests with media are being prepared already (429).
    """
    if not req.image_urls and not req.video_urls:
        return prompt_ids, None
    check_media(server, req)
    from anna_core.media import decode_image

    if not server.media_slots.acquire(blocking=False):  # media work holds a worker thread: bounded, never queued
        raise QueueFullError("too many requests with media are being prepared at once; retry shortly",
                             retry_after_s=1)
    try:
        fetcher = server.media_fetcher
        session = fetcher.session()
        options = {**server.mm_processor_kwargs, **req.mm_processor_kwargs}
        media: dict[str, list[Any]] = {}
        if req.image_urls:  # held decoded until the processor takes them: their pixels together are bounded
            media["image"], left = [], fetcher.policy.max_request_image_pixels
            for url in req.image_urls:
                image = decode_image(session.fetch(url), fetcher.policy.max_image_pixels, left)
                left -= image.width * image.height
                media["image"].append(image)
        if req.video_urls:
            media["video"] = [_decode_video(session.fetch(url), server, options) for url in req.video_urls]
        return server.processor.process(prompt_ids, media, options)
    finally:
        server.media_slots.release()


def _decode_video(data: bytes, server: ServerState, options: dict[str, Any]) -> Any:
    """One fetched video decoded at the request's sampling under the server's media policy."""
    from anna_core.media import decode_video_for

    sampling = server.processor.video_sampling
    fps, max_frames = options.get("fps", sampling[0]), options.get("max_frames", sampling[1])
    for key, value, kinds in (("fps", fps, (int, float)), ("max_frames", max_frames, (int,))):
        if (isinstance(value, bool) or not isinstance(value, kinds) or not 0 < value <= 10**6
                or (isinstance(value, float) and not math.isfinite(value))):  # (math.isfinite(10**400) raises)
            raise InvalidRequestError(f"mm_processor_kwargs.{key} must be a positive number (at most 10**6), got "
                                      f"{str(value)[:40]!r}",
                                      param="mm_processor_kwargs")
    if max_frames > sampling[1]:
        raise InvalidRequestError(f"mm_processor_kwargs.max_frames {max_frames} exceeds the model's limit "
                                  f"({sampling[1]} frames)", param="mm_processor_kwargs")
    return decode_video_for(data, sampling, server.media_fetcher.policy, fps=fps, max_frames=max_frames)


def completion_prompt_ids(server: ServerState, prompt: str | list[int], keep: int | None = None) -> list[int]:
    """One prompt as token ids (a text prompt is tokenized as the checkpoint's tokenizer does; CPU
    work: call it off the event loop); ``keep``: the request's ``truncate_prompt_tokens`` (a long text's tail is
    tokenized, :func:`_encode`).

    Raises:
        InvalidRequestError: a text prompt without a tokenizer, an empty prompt, a text prompt with
            more characters than the context could hold (``context_length_exceeded``, checked before
            tokenizing), or a token id outside the tokenizer's vocabulary (the engine checks the
            model's too).
    """
    if isinstance(prompt, list):
        ids = list(prompt)
        vocab = server.tokenizer.vocab_size if server.tokenizer is not None else None
        if vocab is not None and max(ids) >= vocab:
            raise InvalidRequestError(f"prompt token id {max(ids)} is outside the vocabulary of {vocab} tokens",
                                      param="prompt")
        return ids
    tokenizer = need_tokenizer(server, "a text prompt")
    ids = _encode(server, tokenizer, prompt, keep, "prompt", add_special_tokens=True)
    if not ids:
        raise InvalidRequestError("the prompt is empty", param="prompt")
    return ids


def truncate_prompt(server: ServerState, ids: list[int], keep: int | None, *, has_media: bool = False) -> list[int]:
    """vLLM's ``truncate_prompt_tokens``: the last ``keep`` ids of a prompt (-1: ``max_model_len``; None: all).

    Raises:
        InvalidRequestError: ``keep`` above ``max_model_len``, or a prompt with media that it would cut (its
            placeholders would no longer match the media).
    """
    if keep is None:
        return ids
    limit = server.max_model_len
    if keep > limit:
        raise InvalidRequestError(f"'truncate_prompt_tokens' ({keep}) is larger than the model's context length "
                                  f"({limit})", param="truncate_prompt_tokens")
    keep = limit if keep == -1 else keep
    if len(ids) <= keep:
        return ids
    if has_media:
        raise InvalidRequestError("'truncate_prompt_tokens' would cut a prompt with images or videos",
                                  param="truncate_prompt_tokens")
    return ids[len(ids) - keep:]


def resolve_max_tokens(server: ServerState, requested: int | None, prompt_len: int, prompt_param: str) -> int:
    """The completion token limit for a prompt of ``prompt_len`` tokens.

    Raises:
        InvalidRequestError: the prompt alone fills the context, or prompt + ``requested`` exceeds
            ``max_model_len`` (the message states both numbers).
    """
    limit = server.max_model_len
    if prompt_len >= limit:
        raise InvalidRequestError(
            f"This model's maximum context length is {limit} tokens, but the prompt has {prompt_len} tokens, "
            "leaving no room for a completion.", param=prompt_param, code="context_length_exceeded")
    if requested is not None:
        if prompt_len + requested > limit:
            raise InvalidRequestError(
                f"This model's maximum context length is {limit} tokens, but {prompt_len + requested} tokens "
                f"were requested ({prompt_len} in the prompt + {requested} for the completion "
                "(max_tokens)). Shorten the prompt or lower max_tokens.",
                param="max_tokens", code="context_length_exceeded")
        return requested
    room = limit - prompt_len
    return min(room, server.max_completion_tokens) if server.max_completion_tokens else room


def sampling_params(server: ServerState, sampling: dict[str, Any], max_tokens: int) -> SamplingParams:
    """Merge request fields over server and checkpoint defaults.

    Raises:
        InvalidRequestError: a value is out of range (``param`` names it).
    """
    fields = dict(sampling)
    for name in SAMPLING_DEFAULT_FIELDS:
        if name not in fields:
            default = server.sampling_default(name)
            if default is not None:
                fields[name] = default
    return SamplingParams(max_tokens=max_tokens, **fields)


def choice_params(params: SamplingParams, n: int) -> list[SamplingParams]:
    """``n`` copies of ``params`` with per-choice seeds (see the module doc)."""
    if n == 1:
        return [params]
    if params.seed is None:
        return [attrs.evolve(params) for _ in range(n)]
    half = _INT64 // 2
    return [attrs.evolve(params, seed=(params.seed + i * _SEED_STEP + half) % _INT64 - half) for i in range(n)]


def new_reasoning_parser(server: ServerState, prompt_ids: list[int], interrupt_tags: tuple[str, ...]) -> Any:
    """A reasoning parser started on the prompt (None when the server has none)."""
    if server.reasoning_parser is None:
        return None
    parser = server.reasoning_parser(server.tokenizer)
    parser.start(prompt_ids, interrupt_tags)
    return parser


def new_tool_parser(server: ServerState, req: ChatCompletionRequest) -> Any:
    """A tool-call parser for the request's tools (None without tools or with ``tool_choice: none``):
    the server's (``--tool-call-parser``), or, for a forced choice (``required`` / a named
    function) on a server without one, :class:`~anna_core.parsers.json_calls.JsonToolCallParser`.

    Raises:
        InvalidRequestError: ``tool_choice`` ``auto`` on a server without a tool-call parser.
    """
    if not req.tools.parse_calls:
        return None
    if server.tool_call_parser is not None:
        return server.tool_call_parser(server.tokenizer, tools=req.tools.tools)
    if req.tools.forced:
        return JsonToolCallParser(req.tools.function)
    raise InvalidRequestError(
        "tool_choice 'auto' needs a tool-call parser for this model's call format and this server has none "
        "(start it with --tool-call-parser); 'required' and a named function work without one", param="tool_choice")


def stop_after_first_call(server: ServerState, tool_parser: Any, params: SamplingParams) -> SamplingParams:
    """``parallel_tool_calls: false`` with ``tool_choice: auto``: generation ends with the first call's
    end tag (a stop token when the tag is one token, else a stop string); the parser closes the call.
    (``required`` and named choices are limited by their grammar instead.)"""
    end_tag = getattr(tool_parser, "end_tag", None)
    if not end_tag:
        return params
    ids = server.tokenizer.encode(end_tag)
    if len(ids) == 1:
        return attrs.evolve(params, stop_token_ids=[*params.stop_token_ids, ids[0]])
    return attrs.evolve(params, stop=[*params.stop, end_tag])


def chat_structured(req: ChatCompletionRequest, tool_parser: Any, reasoning: Any) -> StructuredOutput | None:
    """The grammar of a chat request: ``response_format``, or the forced tool call(s); it starts
    after the reasoning when the prompt leaves a reasoning block open.

    Raises:
        InvalidRequestError: the tool grammar cannot be built.
    """
    after = reasoning.end_token_id if reasoning is not None and reasoning.in_reasoning else None
    if req.response_format is not None:
        return attrs.evolve(req.response_format, after_token_id=after)
    if not req.tools.forced or tool_parser is None:
        return None
    try:
        parallel = req.tools.parallel and req.tools.choice == "required"  # a named function: one call
        spec = tool_parser.grammar(req.tools.tools, req.tools.function, parallel,
                                   reasoning is not None and reasoning.in_reasoning)
    except (ValueError, AnnaError) as exc:
        raise InvalidRequestError(str(exc), param="tool_choice") from exc
    if isinstance(spec, str):  # a parser that writes EBNF itself
        spec = StructuredOutput("grammar", spec)
    return attrs.evolve(spec, after_token_id=after, param="tools")
