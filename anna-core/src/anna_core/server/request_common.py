"""The fields every completion request shares (chat and text): model, token limit, streaming, ``n``, the
sampling parameters, stops and logit bias, and the OpenAI / vLLM fields Anna accepts only at their neutral value.

:func:`parse_common` reads them into the keyword arguments of :class:`CommonRequest`; a field nobody defines is
collected in ``unknown_fields``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from anna_core.engine.sampling_params import MAX_LOGPROBS
from anna_core.server.json_fields import (
    bool_field,
    dict_field,
    field_error,
    int_field,
    int_list_field,
    number_field,
    type_name,
)

# Sampling fields passed straight into SamplingParams when the client sets them.
SAMPLING_NUMBERS = ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty")
SAMPLING_INTS = ("top_k", "seed", "min_tokens")
SAMPLING_BOOLS = ("ignore_eos", "skip_special_tokens", "include_stop_str_in_output")

MAX_N = 16
"""The most choices (``n``) a request may ask for per prompt."""

COMMON_FIELDS = frozenset(
    ("model", "max_tokens", "stream", "stream_options", "stop", "stop_token_ids", "user", "n", "logit_bias",
     "service_tier", "allowed_token_ids", "bad_words", "prompt_logprobs", "truncate_prompt_tokens", "use_beam_search")
    + SAMPLING_NUMBERS + SAMPLING_INTS + SAMPLING_BOOLS
)
"""Body fields every completion request may carry."""

MAX_BAD_WORDS = 256
"""Most strings in one ``bad_words``."""

# Known fields Anna does not implement: accepted only when the value is neutral.
_NEUTRAL: dict[str, Callable[[Any], bool]] = {
    "store": lambda v: v is None or v is False,
    "functions": lambda v: not v,
    "function_call": lambda v: v is None or v == "none",
    "modalities": lambda v: v is None or v == ["text"],
    "audio": lambda v: v is None,
    "prediction": lambda v: v is None,
    "web_search_options": lambda v: v is None,
    "reasoning_effort": lambda v: v is None,
    "service_tier": lambda v: v is None or v in ("auto", "default"),
    # vLLM's extras that change what may be generated or returned
    "use_beam_search": lambda v: v is None or v is False,
}
_NEUTRAL_HINT = {
    "functions": "use 'tools'", "function_call": "use 'tool_choice'",
    "reasoning_effort": "use chat_template_kwargs.enable_thinking",
}


def _stop(body: dict[str, Any]) -> list[str]:
    """``stop`` as a list of non-empty strings (a lone string is one stop)."""
    value = body.get("stop")
    if value is None:
        return []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise field_error("'stop' must be a string or an array of strings", "stop")
    if any(s == "" for s in items):
        raise field_error("'stop' strings must not be empty", "stop")
    return list(items)


@attrs.frozen
class CommonRequest:
    """Fields shared by chat and text completions.

    Attributes:
        model: requested model name (None: the served model).
        max_tokens: requested completion limit (None: the server decides).
        stream: answer with server-sent events.
        include_usage: ``stream_options.include_usage``: a final chunk carries usage.
        sampling: SamplingParams fields the client set explicitly (vLLM names).
        unknown_fields: body keys nobody defines (ignored).
        n: independent choices per prompt.
        truncate_prompt_tokens: vLLM's: keep only the last that many prompt tokens (-1: ``max_model_len``); None:
            the whole prompt (a prompt too long for the context is a 400).
        prompt_logprobs: vLLM's: the response carries the prompt tokens' logprobs with that many alternatives
            (``sampling["prompt_logprobs"]`` asks the engine); None: not asked.
    """

    model: str | None
    max_tokens: int | None
    stream: bool
    include_usage: bool
    sampling: dict[str, Any]
    unknown_fields: tuple[str, ...]
    n: int
    truncate_prompt_tokens: int | None
    prompt_logprobs: int | None


def parse_common(body: Any, known: frozenset[str], max_tokens_names: tuple[str, ...]) -> dict[str, Any]:
    """The :class:`CommonRequest` keyword arguments of a decoded body whose endpoint defines the fields ``known``;
    the limit is the first of ``max_tokens_names`` the body sets.

    Raises:
        InvalidRequestError: the body is no object, or a shared field is mistyped, out of range or set to a value
            Anna does not implement.
    """
    if not isinstance(body, dict):
        raise field_error(f"the request body must be a JSON object, got {type_name(body)}", None)  # type: ignore[arg-type]
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise field_error(f"'model' must be a string, got {type_name(model)}", "model")
    for name, neutral in _NEUTRAL.items():
        if name in known and not neutral(body.get(name)):
            hint = f" ({_NEUTRAL_HINT[name]})" if name in _NEUTRAL_HINT else ""
            raise field_error(f"'{name}' = {body.get(name)!r} is not supported by this server{hint}", name)
    max_tokens = None
    for name in max_tokens_names:  # the first one set wins (max_completion_tokens over max_tokens)
        max_tokens = int_field(body, name, minimum=1)
        if max_tokens is not None:
            break
    stream = bool(bool_field(body, "stream"))
    options = dict_field(body, "stream_options") or {}
    include_usage = options.get("include_usage", False)
    if not isinstance(include_usage, bool):
        raise field_error("'stream_options.include_usage' must be a boolean", "stream_options")
    if options and not stream:
        raise field_error("'stream_options' is only allowed when 'stream' is true", "stream_options")
    if body.get("user") is not None and not isinstance(body["user"], str):
        raise field_error("'user' must be a string", "user")
    sampling: dict[str, Any] = {}
    for name in SAMPLING_NUMBERS:
        sampling[name] = number_field(body, name)
    for name in SAMPLING_INTS:
        sampling[name] = int_field(body, name)
    for name in SAMPLING_BOOLS:
        sampling[name] = bool_field(body, name)
    sampling = {k: v for k, v in sampling.items() if v is not None}
    stop = _stop(body)
    if stop:
        sampling["stop"] = stop
    stop_ids = int_list_field(body, "stop_token_ids")
    if any(t < 0 for t in stop_ids):
        raise field_error(f"'stop_token_ids' entries must be token ids (>= 0), got {min(stop_ids)}", "stop_token_ids")
    if stop_ids:
        sampling["stop_token_ids"] = stop_ids
    allowed = body.get("allowed_token_ids")
    if allowed is not None:
        ids = int_list_field(body, "allowed_token_ids")
        if not ids or min(ids) < 0:
            raise field_error("'allowed_token_ids' must be a non-empty array of token ids (>= 0)", "allowed_token_ids")
        sampling["allowed_token_ids"] = ids
    bad = body.get("bad_words")
    if bad is not None:
        if (not isinstance(bad, list) or len(bad) > MAX_BAD_WORDS
                or not all(isinstance(w, str) and w.strip() and len(w) <= 256 for w in bad)):
            raise field_error(f"'bad_words' must be an array of at most {MAX_BAD_WORDS} non-blank strings of at most "
                              "256 characters", "bad_words")
        if bad:
            sampling["bad_words"] = list(bad)
    bias = _logit_bias(body)
    if bias:
        sampling["logit_bias"] = bias
    n = int_field(body, "n", minimum=1)
    if n is not None and n > MAX_N:
        raise field_error(f"'n' must be at most {MAX_N}, got {n}", "n")
    prompt_lp = int_field(body, "prompt_logprobs", minimum=0)
    if prompt_lp is not None:
        if prompt_lp > MAX_LOGPROBS:
            raise field_error(f"'prompt_logprobs' must be at most {MAX_LOGPROBS}, got {prompt_lp}", "prompt_logprobs")
        sampling["prompt_logprobs"] = prompt_lp
    truncate = int_field(body, "truncate_prompt_tokens", minimum=-1)
    if truncate == 0:
        raise field_error("'truncate_prompt_tokens' must be -1 (the context length) or a positive count",
                          "truncate_prompt_tokens")
    return {
        "model": model, "max_tokens": max_tokens, "stream": stream, "include_usage": include_usage,
        "sampling": sampling, "unknown_fields": tuple(sorted(k for k in body if k not in known)), "n": n or 1,
        "truncate_prompt_tokens": truncate, "prompt_logprobs": prompt_lp,
    }


def _logit_bias(body: dict[str, Any]) -> dict[int, float]:
    value = dict_field(body, "logit_bias")
    if not value:
        return {}
    out = {}
    for key, bias in value.items():
        try:
            tid = int(key)
        except (TypeError, ValueError):
            raise field_error(f"'logit_bias' keys must be token ids, got {key!r}", "logit_bias") from None
        if tid < 0 or isinstance(bias, bool) or not isinstance(bias, (int, float)) or not -100 <= bias <= 100:
            raise field_error(f"'logit_bias[{key}]' must be a number in [-100, 100] for a token id >= 0", "logit_bias")
        out[tid] = float(bias)
    return out
