"""OpenAI response bodies and streamed chunks, as plain JSON-ready dicts.

Chat: ``chat.completion`` with ``choices[i].message`` (``content``, ``reasoning_content`` and
``reasoning``, ``tool_calls``), ``choices[i].logprobs`` (``{"content": [...], "refusal": None}``);
streamed as ``chat.completion.chunk`` deltas. Completions: ``text_completion`` with the legacy
``logprobs`` object (``tokens``, ``token_logprobs``, ``top_logprobs``, ``text_offset``).
"""

from __future__ import annotations

from typing import Any

from anna_core.engine.outputs import TokenLogprob

CHAT_RESPONSE_FIELDS = (
    "id", "object", "created", "model", "choices[].index", "choices[].message.role", "choices[].message.content",
    "choices[].message.reasoning_content", "choices[].message.reasoning", "choices[].message.tool_calls",
    "choices[].delta", "choices[].logprobs", "choices[].finish_reason", "usage", "prompt_logprobs",
)
"""Fields the chat bodies below produce (the compatibility table documents each)."""
COMPLETION_RESPONSE_FIELDS = (
    "id", "object", "created", "model", "choices[].index", "choices[].text", "choices[].logprobs",
    "choices[].finish_reason", "usage", "choices[].prompt_logprobs",
)


def usage_body(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict[str, Any]:
    body: dict[str, Any] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                            "total_tokens": prompt_tokens + completion_tokens}
    if cached_tokens:
        body["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    return body


class TokenText:
    """Token ids -> the strings and UTF-8 bytes OpenAI's logprobs show.

    A byte-level BPE token may hold part of a character; its ``bytes`` are exact and its string
    is the UTF-8 decoding with replacement characters (as OpenAI does). Without a tokenizer (a model
    served from token ids only) a token's string is ``"token_id:<id>"``, as vLLM writes it.
    """

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self._byte_of: dict[str, int] | None = None

    def _byte_map(self) -> dict[str, int]:
        if self._byte_of is None:
            from transformers.convert_slow_tokenizer import bytes_to_unicode

            self._byte_of = {ch: b for b, ch in bytes_to_unicode().items()}
        return self._byte_of

    def token_bytes(self, token_id: int) -> list[int]:
        if self.tokenizer is None:
            return list(f"token_id:{token_id}".encode())
        piece = self.tokenizer.convert_ids_to_tokens([token_id])[0]
        byte_of = self._byte_map()
        if piece is not None and all(ch in byte_of for ch in piece):
            return [byte_of[ch] for ch in piece]
        text = self.tokenizer.decode([token_id], skip_special_tokens=False)
        return list(text.encode("utf-8"))

    def token(self, token_id: int) -> str:
        return bytes(self.token_bytes(token_id)).decode("utf-8", errors="replace")


def chat_logprobs(entries: list[TokenLogprob], text: TokenText) -> dict[str, Any]:
    """``choices[i].logprobs`` of a chat response for the given tokens."""
    content = []
    for e in entries:
        content.append({
            "token": text.token(e.token_id), "logprob": e.logprob, "bytes": text.token_bytes(e.token_id),
            "top_logprobs": [{"token": text.token(t), "logprob": lp, "bytes": text.token_bytes(t)} for t, lp in e.top],
        })
    return {"content": content, "refusal": None}


def _top(e: TokenLogprob, text: TokenText, k: int | None = None) -> dict[str, float]:
    """A legacy ``top_logprobs`` entry: the token itself, then its ``k`` (default: all kept) most likely
    alternatives, so up to ``k + 1`` entries (OpenAI's rule, as vLLM answers it)."""
    return {text.token(e.token_id): e.logprob} | {text.token(t): lp for t, lp in e.top[:k]}


def _text_offsets(tokens: list[str], start: int) -> list[int]:
    """Each token string's character offset, the first at ``start``."""
    offsets = []
    for t in tokens:
        offsets.append(start)
        start += len(t)
    return offsets


def completion_logprobs(entries: list[TokenLogprob], text: TokenText, offset: int) -> dict[str, Any]:
    """The legacy completions ``logprobs`` object; ``offset``: characters before the first token."""
    tokens = [text.token(e.token_id) for e in entries]
    return {
        "tokens": tokens,
        "token_logprobs": [e.logprob for e in entries],
        "top_logprobs": [_top(e, text) for e in entries],
        "text_offset": _text_offsets(tokens, offset),
    }


def echo_logprobs(prompt_ids: list[int], entries: list[TokenLogprob | None], text: TokenText,
                  k: int) -> dict[str, Any]:
    """The legacy ``logprobs`` object of an echoed prompt (``echo`` with ``logprobs``): one token per prompt id, the
    first with a null logprob and null alternatives (nothing predicts it), then each token's logprob and, in
    ``top_logprobs``, the token and its ``k`` most likely alternatives; offsets count the token strings from 0."""
    tokens = [text.token(t) for t in prompt_ids]
    return {
        "tokens": tokens,
        "token_logprobs": [None if e is None else e.logprob for e in entries],
        "top_logprobs": [None if e is None else _top(e, text, k) for e in entries],
        "text_offset": _text_offsets(tokens, 0),
    }


def join_logprobs(first: dict[str, Any], then: dict[str, Any] | None) -> dict[str, Any]:
    """Two legacy ``logprobs`` objects as one (``then``'s offsets continue ``first``'s text)."""
    if then is None:
        return first
    end = first["text_offset"][-1] + len(first["tokens"][-1]) if first["tokens"] else 0
    return {"tokens": first["tokens"] + then["tokens"],
            "token_logprobs": first["token_logprobs"] + then["token_logprobs"],
            "top_logprobs": first["top_logprobs"] + then["top_logprobs"],
            "text_offset": first["text_offset"] + [end + o - (then["text_offset"][0] if then["text_offset"] else 0)
                                                   for o in then["text_offset"]]}


def vllm_prompt_logprobs(entries: list[TokenLogprob | None], text: TokenText, k: int) -> list[Any]:
    """vLLM's ``prompt_logprobs``: null for the first prompt token, then per token ``{token id: {logprob, rank,
    decoded_token}}`` for the token itself and its ``k`` most likely alternatives (rank 1 = the most likely)."""
    out: list[Any] = []
    for e in entries:
        if e is None:
            out.append(None)
            continue
        row = {str(t): {"logprob": lp, "rank": r, "decoded_token": text.token(t)}
               for r, (t, lp) in enumerate(e.top[:k], start=1)}
        row[str(e.token_id)] = {"logprob": e.logprob, "rank": e.rank, "decoded_token": text.token(e.token_id)}
        out.append(row)
    return out


def chat_completion_body(request_id: str, created: int, model: str, choices: list[dict[str, Any]],
                         usage: dict[str, Any], prompt_logprobs: list[Any] | None = None) -> dict[str, Any]:
    body = {"id": request_id, "object": "chat.completion", "created": created, "model": model,
            "choices": choices, "usage": usage}
    if prompt_logprobs is not None:  # vLLM's extra, when asked
        body["prompt_logprobs"] = prompt_logprobs
    return body


def chat_chunk(request_id: str, created: int, model: str, choices: list[dict[str, Any]], *,
               usage: dict[str, Any] | None = None, include_usage: bool = False) -> dict[str, Any]:
    """One ``chat.completion.chunk``; ``choices=[]`` with ``usage`` is the final usage chunk."""
    chunk: dict[str, Any] = {"id": request_id, "object": "chat.completion.chunk", "created": created,
                             "model": model, "choices": choices}
    if include_usage:
        chunk["usage"] = usage
    return chunk


def chat_delta_choice(index: int, delta: dict[str, Any], finish_reason: str | None = None,
                      logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}


def completion_body(request_id: str, created: int, model: str, choices: list[dict[str, Any]],
                    usage: dict[str, Any]) -> dict[str, Any]:
    return {"id": request_id, "object": "text_completion", "created": created, "model": model,
            "choices": choices, "usage": usage}


def completion_choice(index: int, text: str, finish_reason: str | None,
                      logprobs: dict[str, Any] | None = None, *, token_ids: list[int] | None = None,
                      prompt_logprobs: list[Any] | None = None) -> dict[str, Any]:
    choice = {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}
    if prompt_logprobs is not None:  # vLLM's extra, when asked
        choice["prompt_logprobs"] = prompt_logprobs
    if token_ids is not None:  # vLLM's return_token_ids extra
        choice["token_ids"] = list(token_ids)
    return choice


def completion_chunk(request_id: str, created: int, model: str, choices: list[dict[str, Any]], *,
                     usage: dict[str, Any] | None = None, include_usage: bool = False) -> dict[str, Any]:
    chunk: dict[str, Any] = {"id": request_id, "object": "text_completion", "created": created, "model": model,
                             "choices": choices}
    if include_usage:
        chunk["usage"] = usage
    return chunk


def model_body(model: str, created: int, max_model_len: int | None) -> dict[str, Any]:
    """One OpenAI model object (``GET /v1/models/{model}``); ``max_model_len`` None: not known
    yet (the model is loading)."""
    return {"id": model, "object": "model", "created": created, "owned_by": "anna",
            "root": model, "parent": None, "max_model_len": max_model_len}


def model_list_body(model: str, created: int, max_model_len: int | None) -> dict[str, Any]:
    return {"object": "list", "data": [model_body(model, created, max_model_len)]}
