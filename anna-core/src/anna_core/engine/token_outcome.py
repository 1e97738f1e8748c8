"""What a request's newest token does to it: the text it adds and whether it ends the request.

:func:`token_outcome` applies a request's stop rules to the token just appended to it, in order: an EOS id
(unless ``ignore_eos``) or a ``stop_token_ids`` entry, once ``min_tokens`` are out, ends it with ``"stop"``;
``max_tokens`` or the context limit with ``"length"``; then the token's text
(:mod:`anna_core.engine.detokenizer`, left out for a stop token unless ``include_stop_str_in_output``) goes
through the stop strings (:mod:`anna_core.engine.stop_checker`), which may end it with ``"stop"`` too.
"""

from __future__ import annotations

import attrs

from anna_core.engine.request import Request


@attrs.frozen
class TokenOutcome:
    """The newest token's effect.

    Attributes:
        finish_reason: ``"stop"``, ``"length"`` or None (the request goes on).
        stop_reason: the stop token id or stop string that ended it, else None.
        delta: the text the token adds (empty without a tokenizer; with a finish, everything left held back).
    """

    finish_reason: str | None
    stop_reason: str | int | None
    delta: str


def token_outcome(req: Request, max_model_len: int) -> TokenOutcome:
    """Apply ``req``'s stop rules to its newest output token (see the module doc); advances its detokenizer
    and stop-string checker.

    Args:
        req: the request, its newest token last in ``output_token_ids``.
        max_model_len: the engine's context limit, in tokens.
    """
    token = req.output_token_ids[-1]
    n_out = len(req.output_token_ids)
    reason: str | None = None
    stop_reason: str | int | None = None
    if n_out > req.params.min_tokens:
        if token in req.eos_token_ids and not req.params.ignore_eos:
            reason = "stop"
        elif token in req.params.stop_token_ids:
            reason, stop_reason = "stop", token
    max_tokens = req.params.max_tokens
    if reason is None and ((max_tokens is not None and n_out >= max_tokens) or req.num_tokens >= max_model_len):
        reason = "length"
    delta = ""
    if req.detokenizer is not None:
        if reason != "stop" or req.params.include_stop_str_in_output:
            delta = req.detokenizer.push([token])
        if reason is not None:
            delta += req.detokenizer.flush()
        delta, matched = req.stop_checker.feed(delta, n_out)
        if matched is not None:
            reason, stop_reason = "stop", matched
        elif reason is not None:
            delta += req.stop_checker.flush()
    return TokenOutcome(reason, stop_reason, delta)
