"""What the engine returns to callers."""

from __future__ import annotations

from typing import Any

import attrs


@attrs.define
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@attrs.define
class TokenLogprob:
    """The log-probability of one generated (or prompt) token (natural log, model distribution).

    Attributes:
        token_id: the token.
        logprob: its log-probability.
        top: the most likely tokens at that position, ``(token_id, logprob)``, best first.
        rank: its rank in the distribution (1: the most likely); set for prompt tokens
            (:mod:`anna_core.engine.prompt_logprobs`), else None.
    """

    token_id: int
    logprob: float
    top: list[tuple[int, float]] = attrs.field(factory=list)
    rank: int | None = None


@attrs.define
class RequestOutput:
    """The state of one request after an engine step (or at its end).

    Attributes:
        request_id: the caller's id.
        prompt_token_ids: the prompt as token ids.
        text: all text generated so far (stop strings excluded unless asked for).
        token_ids: all generated token ids so far.
        delta_text: text added by this step (for streaming).
        delta_token_ids: token ids added by this step.
        finished: True once the request ended.
        finish_reason: ``"stop"`` (EOS, stop token or stop string), ``"length"``, ``"abort"`` or
            ``"error"``; None while running.
        stop_reason: the stop string or token id that ended it, if any.
        usage: prompt and completion token counts.
        error: message when ``finish_reason == "error"``.
        error_code: with ``error``, a machine-readable reason when there is one: ``"insufficient_memory"`` (the
            device ran out of memory in its step) or ``"engine_degraded"`` (the engine is degraded); the server
            answers these 503 with ``Retry-After`` (and puts the code in a stream's error event).
        num_cached_tokens: prompt tokens served from the prefix or prompt cache instead of being
            computed (``usage.prompt_tokens_details.cached_tokens``).
        logprobs: :class:`TokenLogprob` of each id in ``delta_token_ids`` when the request asked
            for ``logprobs`` (else empty).
        metrics: timings in seconds (``arrival``, ``first_token``, ``finished``) from
            ``time.perf_counter``.
        side_outputs: with a model whose capabilities declare ``side_outputs``, what its step left for this
            request besides each token of ``delta_token_ids`` (a row of ``CausalLM.gather_side_outputs``, one per token); else
            empty.
        prompt_logprobs: when the request asked (``SamplingParams.prompt_logprobs``), None for the first prompt token
            then a :class:`TokenLogprob` (with ``rank``) per later prompt token, complete in every output that
            carries a generated token (an output ending the request before its prompt ran, e.g. an abort, holds
            fewer); else None.
    """

    request_id: str
    prompt_token_ids: list[int]
    text: str = ""
    token_ids: list[int] = attrs.field(factory=list)
    delta_text: str = ""
    delta_token_ids: list[int] = attrs.field(factory=list)
    finished: bool = False
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    usage: Usage = attrs.field(factory=Usage)
    error: str | None = None
    num_cached_tokens: int = 0
    error_code: str | None = None
    metrics: dict[str, float] = attrs.field(factory=dict)
    logprobs: list[TokenLogprob] = attrs.field(factory=list)
    side_outputs: list[Any] = attrs.field(factory=list)
    prompt_logprobs: list[TokenLogprob | None] | None = None


def request_output(req: Any, delta: str, delta_ids: list[int], side_outputs: list[Any] | None = None) -> RequestOutput:
    """The output of :class:`~anna_core.engine.request.Request` ``req`` after its latest step:
    appends ``delta`` to ``req.text``; ``delta_ids`` are the token ids this output adds; ``side_outputs``: the
    model's (``RequestOutput.side_outputs``)."""
    req.text += delta
    metrics = {"arrival": req.arrival_time}
    if req.first_token_time is not None:
        metrics["first_token"] = req.first_token_time
    if req.finished_time is not None:
        metrics["finished"] = req.finished_time
    return RequestOutput(
        request_id=req.request_id,
        prompt_token_ids=req.prompt_token_ids,
        text=req.text,
        token_ids=list(req.output_token_ids),
        delta_text=delta,
        delta_token_ids=delta_ids,
        finished=req.finished,
        finish_reason=req.finish_reason,
        stop_reason=req.stop_reason,
        usage=Usage(prompt_tokens=req.num_prompt_tokens, completion_tokens=len(req.output_token_ids)),
        error=req.error,
        error_code=getattr(req, "error_code", None),
        num_cached_tokens=req.num_cached_tokens,
        metrics=metrics,
        logprobs=req.logprobs[len(req.logprobs) - len(delta_ids):] if req.logprobs and delta_ids else [],
        side_outputs=side_outputs or [],
        prompt_logprobs=req.prompt_logprobs if req.params.prompt_logprobs is not None else None,  # (not copied)
    )


def coalesce(earlier: RequestOutput, later: RequestOutput) -> RequestOutput:
    """One output standing for two consecutive outputs of the same request: ``later``'s state with both
    deltas (text, token ids, logprobs) joined, as if one step had produced them."""
    return attrs.evolve(later, delta_text=earlier.delta_text + later.delta_text,
                        delta_token_ids=earlier.delta_token_ids + later.delta_token_ids,
                        logprobs=earlier.logprobs + later.logprobs,
                        side_outputs=earlier.side_outputs + later.side_outputs)
