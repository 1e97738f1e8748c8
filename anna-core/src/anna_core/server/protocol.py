"""OpenAI request parsing and response bodies for ``/v1/chat/completions``, ``/v1/completions``
and ``/v1/models``.

Requests are parsed from the decoded JSON body by hand (not by a schema library) so each error
names the offending field in OpenAI's ``param`` and reads well. Rules:

- a field of the wrong type or out of range raises :class:`InvalidRequestError` (HTTP 400);
- a field OpenAI or vLLM defines that Anna does not implement is accepted only at its neutral
  value (``store=false``, ``modalities=["text"]`` ...); any other value is a 400 naming the
  field, never silently dropped;
- a field nobody defines is ignored and reported in ``unknown_fields`` (the route logs one
  warning per field name).

Tools, ``tool_choice`` and ``response_format`` are validated in :mod:`anna_core.server.tools`.
Response bodies are built in :mod:`anna_core.server.responses`.
Fields every request shares are parsed in :mod:`anna_core.server.request_common` (typed readers in
:mod:`anna_core.server.json_fields`), chat messages in :mod:`anna_core.server.chat_messages`.
"""

from __future__ import annotations

from typing import Any

import attrs

from anna_core.engine.sampling_params import MAX_LOGPROBS, StructuredOutput
from anna_core.server.chat_messages import MEDIA_PARTS, parse_messages
from anna_core.server.json_fields import bool_field, dict_field, field_error, int_field
from anna_core.server.request_common import (
    COMMON_FIELDS,
    MAX_N,
    SAMPLING_BOOLS,
    SAMPLING_INTS,
    SAMPLING_NUMBERS,
    CommonRequest,
    parse_common,
)
from anna_core.server.structured_fields import STRUCTURED_FIELDS, parse_structured
from anna_core.server.tools import ToolSetup, parse_tools

__all__ = [
    "CHAT_FIELDS", "COMMON_FIELDS", "COMPLETION_FIELDS", "MAX_N", "MEDIA_PARTS", "SAMPLING_BOOLS", "SAMPLING_INTS",
    "SAMPLING_NUMBERS", "ChatCompletionRequest", "CompletionRequest",
]

CHAT_FIELDS = COMMON_FIELDS | {
    "messages", "max_completion_tokens", "chat_template_kwargs", "add_generation_prompt",
    "continue_final_message", "tools", "tool_choice", "parallel_tool_calls", "response_format",
    "logprobs", "top_logprobs", "store", "metadata", "functions", "function_call", "modalities", "audio",
    "prediction", "web_search_options", "reasoning_effort", "include_reasoning", "mm_processor_kwargs",
} | STRUCTURED_FIELDS
COMPLETION_FIELDS = COMMON_FIELDS | {"prompt", "echo", "suffix", "best_of", "logprobs", "return_token_ids"} | STRUCTURED_FIELDS

# chat_template_kwargs may not override what the server itself passes to the template.
_RESERVED_TEMPLATE_KWARGS = frozenset(
    ("messages", "conversation", "tools", "tokenize", "add_generation_prompt", "continue_final_message",
     "return_dict", "chat_template")
)


@attrs.frozen
class ChatCompletionRequest(CommonRequest):
    """A parsed ``POST /v1/chat/completions`` body.

    Attributes:
        messages: messages with text content flattened to strings (a message with media keeps its parts as
            ``{"type": "text", "text"}`` / ``{"type": "image"}`` / ``{"type": "video"}``; other keys kept for the
            template; assistant reasoning under ``reasoning_content`` and ``reasoning``, tool-call
            arguments as objects, an assistant's missing or null ``content`` as ``""``, a null or
            empty ``tool_calls`` left out).
        chat_template_kwargs: extra variables for the chat template (``enable_thinking`` ...).
        add_generation_prompt: end the prompt with the assistant header (default True).
        continue_final_message: continue the last (assistant) message instead of starting one
            (default: True when the last message is the assistant's).
        tools: tools, ``tool_choice`` and ``parallel_tool_calls``.
        response_format: the grammar the output follows: ``response_format``'s ``json_object`` / ``json_schema``,
            or vLLM's ``structured_outputs`` / ``guided_*`` (:mod:`anna_core.server.structured_fields`; None: free
            text).
        include_reasoning: return the reasoning (vLLM's ``include_reasoning``, default True).
        image_urls: the URLs of the messages' ``image_url`` parts, in order (earlier turns included).
        video_urls: the URLs of the messages' ``video_url`` parts, in order (earlier turns included).
        mm_processor_kwargs: settings for the model's media processor (vLLM's name; Qwen3.5: ``min_pixels``,
            ``max_pixels`` for images, ``fps`` and ``max_frames`` for videos), checked by the processor.
    """

    messages: list[dict[str, Any]] = attrs.field(factory=list)
    chat_template_kwargs: dict[str, Any] = attrs.field(factory=dict)
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    tools: ToolSetup = attrs.field(factory=ToolSetup)
    response_format: StructuredOutput | None = None
    include_reasoning: bool = True
    image_urls: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    video_urls: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    mm_processor_kwargs: dict[str, Any] = attrs.field(factory=dict)

    @classmethod
    def from_json(cls, body: Any) -> ChatCompletionRequest:
        """Parse and validate a decoded JSON body.

        Raises:
            InvalidRequestError: a field is missing, mistyped, out of range or unsupported.
        """
        common = parse_common(body, CHAT_FIELDS, ("max_completion_tokens", "max_tokens"))
        kwargs = dict_field(body, "chat_template_kwargs") or {}
        reserved = sorted(_RESERVED_TEMPLATE_KWARGS & set(kwargs))
        if reserved:
            raise field_error(f"'chat_template_kwargs' may not set {reserved}", "chat_template_kwargs")
        add_gen = bool_field(body, "add_generation_prompt")
        cont = bool_field(body, "continue_final_message")
        if cont and add_gen:
            raise field_error("'continue_final_message' and 'add_generation_prompt' cannot both be true",
                        "continue_final_message")
        messages, media_urls = parse_messages(body.get("messages"))
        if cont is None:
            cont = add_gen is None and messages[-1]["role"] == "assistant"
        if cont and messages[-1]["role"] != "assistant":
            raise field_error("'continue_final_message' needs an assistant message last", "continue_final_message")
        logprobs = bool_field(body, "logprobs")
        top = int_field(body, "top_logprobs", minimum=0)
        if top is not None and top > MAX_LOGPROBS:
            raise field_error(f"'top_logprobs' must be at most {MAX_LOGPROBS}, got {top}", "top_logprobs")
        if top and not logprobs:
            raise field_error("'top_logprobs' needs 'logprobs': true", "top_logprobs")
        if logprobs:
            common["sampling"]["logprobs"] = top or 0
        tools = parse_tools(body)
        response_format = parse_structured(body)
        if response_format is not None and tools.forced:
            raise field_error(f"'{response_format.param}' cannot be combined with a forced 'tool_choice'",
                              response_format.param)
        include_reasoning = bool_field(body, "include_reasoning")
        return cls(
            **common,
            messages=messages,
            chat_template_kwargs=dict(kwargs),
            add_generation_prompt=not cont if add_gen is None else add_gen,
            continue_final_message=cont,
            tools=tools,
            response_format=response_format,
            include_reasoning=True if include_reasoning is None else include_reasoning,
            image_urls=media_urls["image"],
            video_urls=media_urls["video"],
            mm_processor_kwargs=dict(dict_field(body, "mm_processor_kwargs") or {}),
        )


def _prompt_item(item: Any) -> str | list[int] | None:
    if isinstance(item, str):
        return item
    if isinstance(item, list) and item and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0
                                               for t in item):
        return list(item)
    return None


@attrs.frozen
class CompletionRequest(CommonRequest):
    """A parsed ``POST /v1/completions`` body.

    Attributes:
        prompts: one or more prompts, each text or token ids (choice ``i * n + j`` is prompt ``i``'s
            ``j``-th sample).
        echo: prepend the prompt to each choice's text.
        return_token_ids: each choice (and each streamed chunk) also carries the generated
            ``token_ids`` (vLLM's extra); always on for a model served without a tokenizer.
        structured: the grammar the output follows (``response_format``, ``structured_outputs``, ``guided_*``:
            :mod:`anna_core.server.structured_fields`), or None.
        echo_logprobs: with ``echo``, the ``logprobs`` count: the logprobs object starts with the prompt's tokens
            (their logprobs computed: ``prompt_logprobs`` asked of the engine); else None.
        echo_only: ``echo`` with ``max_tokens`` 0 (OpenAI's form for scoring a prompt): the choices hold the prompt
            alone (one token is computed, as vLLM does, and dropped); ``max_tokens`` is then 1.
    """

    prompts: list[str | list[int]] = attrs.field(factory=list)
    echo: bool = False
    return_token_ids: bool = False
    structured: StructuredOutput | None = None
    echo_logprobs: int | None = None
    echo_only: bool = False

    @property
    def prompt(self) -> str | list[int]:
        """The first prompt."""
        return self.prompts[0]

    @classmethod
    def from_json(cls, body: Any) -> CompletionRequest:
        """Parse and validate a decoded JSON body.

        Raises:
            InvalidRequestError: a field is missing, mistyped, out of range or unsupported.
        """
        # OpenAI's echo with max_tokens 0 scores the prompt and generates nothing (vLLM computes one token and drops it)
        echo_only = (isinstance(body, dict) and body.get("echo") is True and body.get("max_tokens") == 0
                     and not isinstance(body.get("max_tokens"), bool))
        if echo_only:
            body = {**body, "max_tokens": 1}
        common = parse_common(body, COMPLETION_FIELDS, ("max_tokens",))
        raw = body.get("prompt")
        single = _prompt_item(raw)
        if single is not None:
            prompts = [single]
        elif isinstance(raw, list) and raw and all(_prompt_item(p) is not None for p in raw):
            prompts = [_prompt_item(p) for p in raw]
        else:
            raise field_error("'prompt' is required: a string, an array of token ids, or an array of those", "prompt")
        if len(prompts) * common["n"] > MAX_N * 4:
            raise field_error(f"at most {MAX_N * 4} choices per request (prompts x n)", "prompt")
        best_of = int_field(body, "best_of", minimum=1)
        if best_of is not None and best_of != common["n"]:
            raise field_error("'best_of' other than 'n' is not supported (every sample is returned)", "best_of")
        suffix = body.get("suffix")
        if suffix is not None and not isinstance(suffix, str):
            raise field_error("'suffix' must be a string", "suffix")
        if suffix:
            raise field_error("'suffix' (fill-in-the-middle) is not supported by this model's completions API", "suffix")
        logprobs = int_field(body, "logprobs", minimum=0)
        if logprobs is not None:
            if logprobs > MAX_LOGPROBS:
                raise field_error(f"'logprobs' must be at most {MAX_LOGPROBS}, got {logprobs}", "logprobs")
            common["sampling"]["logprobs"] = logprobs
        echo = bool(bool_field(body, "echo"))
        echo_logprobs = logprobs if echo else None
        if echo_logprobs is not None:  # the prompt's tokens and logprobs lead the logprobs object
            common["sampling"]["prompt_logprobs"] = max(echo_logprobs, common["sampling"].get("prompt_logprobs", 0))
        return cls(**common, prompts=prompts, echo=echo, return_token_ids=bool(bool_field(body, "return_token_ids")),
                   structured=parse_structured(body), echo_logprobs=echo_logprobs, echo_only=echo_only)
