"""Per-request sampling settings, with vLLM's field names."""

from __future__ import annotations

from typing import Any

import attrs

from anna_core.errors import InvalidRequestError

STRUCTURED_KINDS = ("json_object", "json_schema", "grammar", "regex", "structural_tag")
MAX_LOGPROBS = 20


def _check(cond: bool, message: str, param: str) -> None:
    if not cond:
        raise InvalidRequestError(message, param=param)


@attrs.frozen
class StructuredOutput:
    """A grammar the output must follow (constrained decoding with xgrammar).

    Attributes:
        kind: ``"json_object"`` (any JSON object), ``"json_schema"`` (``spec`` is the schema as
            JSON text), ``"grammar"`` (``spec`` is an xgrammar EBNF grammar with a ``root`` rule, or a Lark grammar
            when it holds no ``::=``), ``"regex"``
            (``spec`` is a regular expression the whole output matches) or
            ``"structural_tag"`` (``spec`` is an xgrammar structural tag as JSON text, such as
            ``xgrammar.get_model_structural_tag`` builds for a model's tool-call format).
        spec: see ``kind``.
        after_token_id: constrain only the tokens generated after this token (e.g. ``</think>``,
            so that a reasoning model thinks freely first); None: from the first token.
        param: the request field the grammar comes from, named by a compile error (``"response_format"``,
            ``"structured_outputs"``, ``"guided_regex"`` ..., or ``"tools"`` for a forced tool choice).
    """

    kind: str
    spec: str = ""
    after_token_id: int | None = None
    param: str = "response_format"

    def __attrs_post_init__(self) -> None:
        _check(self.kind in STRUCTURED_KINDS, f"structured output kind must be one of {STRUCTURED_KINDS}",
               "response_format")


def _bias(value: Any) -> dict[int, float]:
    return {int(k): float(v) for k, v in (value or {}).items()}


@attrs.define
class SamplingParams:
    """How to sample one request.

    ``temperature == 0`` is greedy. ``top_k <= 0`` disables top-k (``-1`` like vLLM);
    ``top_p == 1`` and ``min_p == 0`` disable those filters. Penalties follow vLLM / OpenAI:
    presence and frequency penalties are subtracted from the logits of generated tokens
    (``logit -= presence * (count > 0) + frequency * count``); the repetition penalty
    (Keskar et al., CTRL, 2019) divides positive and multiplies negative logits of tokens seen in
    the prompt or output. ``logit_bias`` (token id -> value in [-100, 100]) is added to the logits
    before everything else; ``allowed_token_ids`` (vLLM's) sets every other token's logit to ``-inf``;
    ``bad_words`` (vLLM's) bans the token that would complete one of the words
    (:meth:`~anna_core.engine.logits_processors.LogitsProcessors.bad_word_ids`);
    ``structured`` masks tokens the grammar forbids; ``logprobs`` asks for
    the chosen token's log-probability plus that many top alternatives (0..20) under the model's
    unprocessed distribution (see :mod:`anna_core.engine.logprobs`); ``prompt_logprobs`` asks the same for every
    prompt token after the first (:mod:`anna_core.engine.prompt_logprobs`; the request computes its whole prompt).

    Raises:
        InvalidRequestError: a field is out of range (``param`` names it).
    """

    max_tokens: int | None = 16
    min_tokens: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    seed: int | None = None
    stop: list[str] = attrs.field(factory=list, converter=lambda s: [s] if isinstance(s, str) else list(s or []))
    stop_token_ids: list[int] = attrs.field(factory=list, converter=lambda s: list(s or []))
    ignore_eos: bool = False
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    logprobs: int | None = None
    logit_bias: dict[int, float] = attrs.field(factory=dict, converter=_bias)
    structured: StructuredOutput | None = None
    allowed_token_ids: tuple[int, ...] | None = attrs.field(default=None,
                                                            converter=lambda v: None if v is None else tuple(v))
    bad_words: list[str] = attrs.field(factory=list, converter=lambda v: list(v or []))
    prompt_logprobs: int | None = None

    def __attrs_post_init__(self) -> None:
        _check(self.max_tokens is None or self.max_tokens >= 1, "max_tokens must be at least 1", "max_tokens")
        _check(self.min_tokens >= 0, "min_tokens must be non-negative", "min_tokens")
        _check(self.max_tokens is None or self.min_tokens <= self.max_tokens,
               "min_tokens must not exceed max_tokens", "min_tokens")
        _check(0.0 <= self.temperature <= 100.0, "temperature must be in [0, 100]", "temperature")
        _check(0.0 < self.top_p <= 1.0, "top_p must be in (0, 1]", "top_p")
        _check(self.top_k == -1 or self.top_k >= 0, "top_k must be -1 (disabled) or >= 0", "top_k")
        _check(self.seed is None or -(1 << 63) <= self.seed < (1 << 63),
               "seed must be a 64-bit signed integer (in [-2**63, 2**63 - 1])", "seed")
        _check(0.0 <= self.min_p <= 1.0, "min_p must be in [0, 1]", "min_p")
        _check(-2.0 <= self.presence_penalty <= 2.0, "presence_penalty must be in [-2, 2]", "presence_penalty")
        _check(-2.0 <= self.frequency_penalty <= 2.0, "frequency_penalty must be in [-2, 2]", "frequency_penalty")
        _check(0.0 < self.repetition_penalty <= 10.0, "repetition_penalty must be in (0, 10]", "repetition_penalty")
        _check(all(isinstance(s, str) and s for s in self.stop), "stop strings must be non-empty strings", "stop")
        _check(self.logprobs is None or 0 <= self.logprobs <= MAX_LOGPROBS,
               f"logprobs must be in [0, {MAX_LOGPROBS}]", "logprobs")
        _check(all(-100.0 <= v <= 100.0 for v in self.logit_bias.values()),
               "logit_bias values must be in [-100, 100]", "logit_bias")
        _check(all(k >= 0 for k in self.logit_bias), "logit_bias keys must be token ids >= 0", "logit_bias")
        _check(self.allowed_token_ids is None or (len(self.allowed_token_ids) > 0
                                                  and all(t >= 0 for t in self.allowed_token_ids)),
               "allowed_token_ids must be a non-empty list of token ids >= 0", "allowed_token_ids")
        _check(all(isinstance(w, str) and w.strip() for w in self.bad_words), "bad_words must be non-blank strings",
               "bad_words")
        _check(self.prompt_logprobs is None or 0 <= self.prompt_logprobs <= MAX_LOGPROBS,
               f"prompt_logprobs must be in [0, {MAX_LOGPROBS}]", "prompt_logprobs")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0
