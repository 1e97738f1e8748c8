"""Per-request sampling settings, with vLLM's field names."""

from __future__ import annotations

import attrs

from anna_core.errors import InvalidRequestError


def _check(cond: bool, message: str, param: str) -> None:
    if not cond:
        raise InvalidRequestError(message, param=param)


@attrs.define
class SamplingParams:
    """How to sample one request.

    ``temperature == 0`` is greedy. ``top_k <= 0`` disables top-k (``-1`` like vLLM);
    ``top_p == 1`` and ``min_p == 0`` disable those filters. Penalties follow vLLM / OpenAI:
    presence and frequency penalties are subtracted from the logits of generated tokens
    (``logit -= presence * (count > 0) + frequency * count``); the repetition penalty
    (Keskar et al., CTRL, 2019) divides positive and multiplies negative logits of tokens seen in
    the prompt or output.

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

    def __attrs_post_init__(self) -> None:
        _check(self.max_tokens is None or self.max_tokens >= 1, "max_tokens must be at least 1", "max_tokens")
        _check(self.min_tokens >= 0, "min_tokens must be non-negative", "min_tokens")
        _check(self.max_tokens is None or self.min_tokens <= self.max_tokens,
               "min_tokens must not exceed max_tokens", "min_tokens")
        _check(0.0 <= self.temperature <= 100.0, "temperature must be in [0, 100]", "temperature")
        _check(0.0 < self.top_p <= 1.0, "top_p must be in (0, 1]", "top_p")
        _check(self.top_k == -1 or self.top_k >= 0, "top_k must be -1 (disabled) or >= 0", "top_k")
        _check(0.0 <= self.min_p <= 1.0, "min_p must be in [0, 1]", "min_p")
        _check(-2.0 <= self.presence_penalty <= 2.0, "presence_penalty must be in [-2, 2]", "presence_penalty")
        _check(-2.0 <= self.frequency_penalty <= 2.0, "frequency_penalty must be in [-2, 2]", "frequency_penalty")
        _check(0.0 < self.repetition_penalty <= 10.0, "repetition_penalty must be in (0, 10]", "repetition_penalty")
        _check(all(isinstance(s, str) and s for s in self.stop), "stop strings must be non-empty strings", "stop")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0
