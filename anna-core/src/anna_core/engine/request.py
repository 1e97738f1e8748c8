"""Per-request engine state (pure Python: the scheduler imports it, so no torch here)."""

from __future__ import annotations

import enum
import time
from typing import Any

from anna_core.engine.prefix_cache import extend_hashes
from anna_core.engine.sampling_params import SamplingParams
from anna_core.multimodal import MultiModalInputs

PENDING = -1
"""Placeholder in :attr:`Request.output_token_ids` for a token sampled by a step that is launched on
the device but not read back yet (asynchronous scheduling, see :mod:`anna_core.engine.llm_engine`).
At most the last entry is pending; the engine replaces it before it reaches any caller."""


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class Request:
    """One generation request as the engine tracks it.

    ``num_computed_tokens`` counts the tokens of :attr:`all_token_ids` whose K/V (and recurrent
    state) are in the caches. A request samples in a step whose chunk reaches the end of its known
    tokens. Preemption by recompute resets ``num_computed_tokens`` to 0; the prompt and the tokens
    generated so far are then computed again before the next token is sampled.

    Attributes:
        request_id: the caller's id.
        prompt_token_ids: the prompt.
        params: sampling settings.
        eos_token_ids: ids that end the request unless ``params.ignore_eos``.
        seed: the sampling seed (``params.seed`` or a random one drawn at arrival).
        output_token_ids: generated ids so far.
        status: waiting, running or finished.
        finish_reason / stop_reason: set when finished.
        detokenizer / stop_checker: text pipeline (``None`` without a tokenizer).
        text: text emitted to the caller so far; ``emitted_tokens``: ids already reported.
        arrival_time / first_token_time / finished_time: ``time.perf_counter`` timestamps.
        num_preemptions: how often it was preempted.
        num_cached_tokens: prompt tokens served from a cache at the first admission.
        block_hashes: prefix-cache chain keys of its full blocks so far (see
            :mod:`anna_core.engine.prefix_cache`; :meth:`hashes_upto` extends them).
        multimodal: its media and positions (:mod:`anna_core.multimodal`), or None (text).
        last_scheduled: the scheduler step that last computed it (decode rotation).
        side_outputs: with a model that declares ``side_outputs``, what each step that produced a token left for
            this request (entry ``k`` beside output ``k``; :attr:`~anna_core.engine.outputs.RequestOutput.side_outputs`).
        held_token: with a model that declares ``recompute_holds_last``, the last generated token while the request
            recomputes after a preemption (taken out of ``output_token_ids`` and put back, without a new output, by
            the step whose chunk reaches the token before it); else None.
    """

    def __init__(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams, *,
                 eos_token_ids: tuple[int, ...] = (), seed: int = 0, arrival_time: float | None = None,
                 multimodal: MultiModalInputs | None = None):
        self.request_id = request_id
        self.prompt_token_ids = list(prompt_token_ids)
        self.params = params
        self.eos_token_ids = tuple(eos_token_ids)
        self.seed = seed
        self.output_token_ids: list[int] = []
        self.status = RequestStatus.WAITING
        self.num_computed_tokens = 0
        self.finish_reason: str | None = None
        self.stop_reason: str | int | None = None
        self.error: str | None = None
        self.error_code: str | None = None  # with error: why, for the server's status (RequestOutput.error_code)
        self.detokenizer: Any = None
        self.stop_checker: Any = None
        self.text = ""
        self.emitted_tokens = 0
        self.arrival_time = time.perf_counter() if arrival_time is None else arrival_time
        self.first_token_time: float | None = None
        self.finished_time: float | None = None
        self.num_preemptions = 0
        self.grammar: Any = None  # logits_processors.GrammarState (structured output)
        self.bad_word_ids: tuple[tuple[int, ...], ...] = ()  # logits_processors.LogitsProcessors.bad_word_ids
        # engine.prompt_logprobs: None for the first prompt token, then one TokenLogprob per prompt token (when asked)
        self.prompt_logprobs: list[Any] = [None] if params.prompt_logprobs is not None else []
        self.logprobs: list[Any] = []  # outputs.TokenLogprob per generated token (when asked)
        self.num_cached_tokens = 0
        self.block_hashes: list[bytes] = []
        self.last_scheduled = -1
        self.admitted_once = False
        self.side_outputs: list[Any] = []
        self.held_token: int | None = None
        self.multimodal = multimodal if multimodal is not None and not multimodal.is_plain else None
        # the prompt-cache key: the prompt's ids, and its media when it has some
        ids = tuple(self.prompt_token_ids)
        self.prompt_key: tuple = ids if self.multimodal is None else (ids, self.multimodal.key)

    @property
    def recording_prompt_logprobs(self) -> bool:
        """It asked for prompt logprobs (:mod:`anna_core.engine.prompt_logprobs`) and does not hold them all yet: it
        takes no prefix-cache or prompt-cache hit."""
        return self.params.prompt_logprobs is not None and len(self.prompt_logprobs) < self.num_prompt_tokens

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def all_token_ids(self) -> list[int]:
        """Prompt plus generated ids (a new list)."""
        return self.prompt_token_ids + self.output_token_ids

    @property
    def num_tokens(self) -> int:
        """Prompt plus generated tokens."""
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    def token_slice(self, start: int, end: int) -> list[int]:
        """Tokens ``start:end`` of prompt + output, without building the concatenation."""
        p = len(self.prompt_token_ids)
        if end <= p:
            return self.prompt_token_ids[start:end]
        if start >= p:
            return self.output_token_ids[start - p:end - p]
        return self.prompt_token_ids[start:] + self.output_token_ids[:end - p]

    def hashes_upto(self, num_blocks: int, block_size: int) -> list[bytes]:
        """:attr:`block_hashes` extended to cover ``num_blocks`` full blocks (media hashed into the blocks
        their placeholders fall in); returns the list itself."""
        mm, p = self.multimodal, len(self.prompt_token_ids)
        extra = (lambda start, end: mm.block_extra(start, end, p)) if mm is not None else None  # noqa: E731
        return extend_hashes(self.block_hashes, self.token_slice, num_blocks, block_size, extra)

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        """Ids that end the request when sampled (EOS unless ignored, plus ``stop_token_ids``)."""
        ids = tuple(self.params.stop_token_ids)
        if not self.params.ignore_eos:
            ids = self.eos_token_ids + ids
        return ids

    def reached_length(self, max_model_len: int | None) -> bool:
        """Whether ``max_tokens`` outputs (pending ones included) or ``max_model_len`` tokens are
        reached: such a request ends once its last token is read back, so it is not scheduled again."""
        max_tokens = self.params.max_tokens
        if max_tokens is not None and len(self.output_token_ids) >= max_tokens:
            return True
        return max_model_len is not None and self.num_tokens >= max_model_len

    def drop_pending(self) -> None:
        """Remove a trailing :data:`PENDING` placeholder (the request ends before it is read back)."""
        while self.output_token_ids and self.output_token_ids[-1] == PENDING:
            self.output_token_ids.pop()

    @property
    def finished(self) -> bool:
        return self.status is RequestStatus.FINISHED
