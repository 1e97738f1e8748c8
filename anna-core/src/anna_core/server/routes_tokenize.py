"""vLLM's ``POST /tokenize`` and ``POST /detokenize``.

``/tokenize`` takes ``{"prompt": str}`` (``add_special_tokens``, default True) or a chat body
(``messages``, ``add_generation_prompt``, ``continue_final_message``, ``chat_template_kwargs``,
``tools``) rendered exactly as ``/v1/chat/completions`` would, and answers
``{"count", "max_model_len", "tokens"}`` (plus ``token_strs`` with ``return_token_strs``).
``/detokenize`` takes ``{"tokens": [ids]}`` and answers ``{"prompt": text}``. Rendering and
tokenizing run in a worker thread, under the prompt-size bound of :mod:`anna_core.server.limits`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from litestar import Request, post

from anna_core.errors import InvalidRequestError
from anna_core.server import prepare, protocol
from anna_core.server.limits import check_prompt_chars
from anna_core.server.request_body import json_body
from anna_core.server.state import ServerState


async def _body_and_tokenizer(request: Request, server: ServerState, what: str) -> tuple[dict[str, Any], Any]:
    """The decoded JSON object body and the served tokenizer.

    Raises:
        InvalidRequestError: the body is not a JSON object, or the model has no tokenizer.
        ModelNotFoundError: ``model`` names another model.
    """
    body = await json_body(request)
    if not isinstance(body, dict):
        raise InvalidRequestError("the request body must be a JSON object")
    prepare.check_servable(server, body.get("model"))
    return body, prepare.need_tokenizer(server, what)


@post("/tokenize", status_code=200)
async def tokenize(request: Request, server: ServerState) -> dict[str, Any]:
    body, tokenizer = await _body_and_tokenizer(request, server, "tokenization")
    return await asyncio.to_thread(_tokenize, server, tokenizer, body)  # CPU work: off the event loop


def _tokenize(server: ServerState, tokenizer: Any, body: dict[str, Any]) -> dict[str, Any]:
    if "messages" in body:
        chat = protocol.ChatCompletionRequest.from_json({k: v for k, v in body.items()
                                                         if k not in ("add_special_tokens", "return_token_strs")})
        ids = prepare.chat_prompt_ids(server, chat)
    else:
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            raise InvalidRequestError("'prompt' (a string) or 'messages' is required", param="prompt")
        add_special = body.get("add_special_tokens", True)
        if not isinstance(add_special, bool):
            raise InvalidRequestError("'add_special_tokens' must be a boolean", param="add_special_tokens")
        check_prompt_chars(len(prompt), server.max_model_len, "prompt")
        ids = tokenizer.encode(prompt, add_special_tokens=add_special)
    out: dict[str, Any] = {"count": len(ids), "max_model_len": server.max_model_len, "tokens": ids}
    if body.get("return_token_strs"):
        out["token_strs"] = tokenizer.convert_ids_to_tokens(ids)
    return out


@post("/detokenize", status_code=200)
async def detokenize(request: Request, server: ServerState) -> dict[str, Any]:
    body, tokenizer = await _body_and_tokenizer(request, server, "detokenization")
    ids = body.get("tokens")
    if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids):
        raise InvalidRequestError("'tokens' must be an array of token ids", param="tokens")
    if ids and max(ids) >= tokenizer.vocab_size:
        raise InvalidRequestError(f"token id {max(ids)} is outside the vocabulary of {tokenizer.vocab_size} tokens",
                                  param="tokens")
    return {"prompt": tokenizer.decode(ids, skip_special_tokens=False)}


ROUTES = [tokenize, detokenize]
