"""Turn a parsed OpenAI request into what the engine takes: prompt token ids and SamplingParams.

Chat prompts are rendered with the checkpoint's own chat template
(:meth:`anna_core.tokenizer.Tokenizer.apply_chat_template`) and tokenized without adding special
tokens (the template writes them). Sampling fields resolve in this order: the request's own
value, the server flag (``--temperature`` ...), the checkpoint's ``generation_config.json``,
the :class:`SamplingParams` default.
"""

from __future__ import annotations

from typing import Any

from anna_core.engine.sampling_params import SamplingParams
from anna_core.errors import InvalidRequestError
from anna_core.server.errors import ModelNotFoundError, ServiceUnavailableError
from anna_core.server.protocol import ChatCompletionRequest, CompletionRequest
from anna_core.server.state import SAMPLING_DEFAULT_FIELDS, ServerState


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
        raise ServiceUnavailableError(f"{why}; retry when GET /health answers 200")
    if requested_model is not None and requested_model != server.model_name:
        raise ModelNotFoundError(requested_model, server.model_name)


def _need_tokenizer(server: ServerState, what: str) -> Any:
    if server.tokenizer is None:
        raise InvalidRequestError(f"this model was loaded without a tokenizer, so {what} is not possible")
    return server.tokenizer


def chat_prompt_ids(server: ServerState, req: ChatCompletionRequest) -> list[int]:
    """Render the messages with the chat template and tokenize them.

    Raises:
        InvalidRequestError: no tokenizer or chat template, or the template rejected the messages.
    """
    tokenizer = _need_tokenizer(server, "chat completion")
    template_kwargs = dict(req.chat_template_kwargs)
    if "enable_thinking" not in template_kwargs and server.enable_thinking is not None:
        template_kwargs["enable_thinking"] = server.enable_thinking
    text = tokenizer.apply_chat_template(
        req.messages,
        add_generation_prompt=req.add_generation_prompt,
        continue_final_message=req.continue_final_message,
        **template_kwargs,
    )
    return tokenizer.encode(text, add_special_tokens=False)


def completion_prompt_ids(server: ServerState, req: CompletionRequest) -> list[int]:
    """The prompt as token ids (a text prompt is tokenized as the checkpoint's tokenizer does).

    Raises:
        InvalidRequestError: a text prompt without a tokenizer, an empty prompt, or a token id
            outside the tokenizer's vocabulary (the engine checks the model's too).
    """
    if isinstance(req.prompt, list):
        ids = list(req.prompt)
        vocab = server.tokenizer.vocab_size if server.tokenizer is not None else None
        if vocab is not None and max(ids) >= vocab:
            raise InvalidRequestError(f"prompt token id {max(ids)} is outside the vocabulary of {vocab} tokens",
                                      param="prompt")
        return ids
    ids = _need_tokenizer(server, "a text prompt").encode(req.prompt, add_special_tokens=True)
    if not ids:
        raise InvalidRequestError("the prompt is empty", param="prompt")
    return ids


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
