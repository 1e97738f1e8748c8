"""The scheduler: which requests compute which tokens each step (pure Python, no torch).

Each step mixes prefill chunks and decodes under a token budget. Running requests go first, oldest
first (a decode costs one token; an unfinished prefill continues with its next chunk); then waiting
requests are admitted first-come first-served while sequences, state slots, blocks and budget
remain. When a running request needs a KV block and none is free, the newest running request is
preempted by recompute: its blocks and slot are freed and it goes back to the front of the waiting
queue; when resumed it computes its prompt and generated tokens again, so its output is unchanged.
"""

from __future__ import annotations

from collections import deque

import attrs

from anna_core.engine.block_manager import BlockManager
from anna_core.engine.config import EngineConfig
from anna_core.engine.request import Request, RequestStatus
from anna_core.engine.state_pool import StatePool


@attrs.define
class ScheduledSeq:
    """One sequence's share of a step.

    Attributes:
        request: the request.
        start: position of the first token computed this step (== tokens already cached).
        token_ids: the tokens computed this step (positions ``start .. start+len-1``).
        block_table: the sequence's KV blocks, covering at least ``start + len(token_ids)`` tokens.
        state_slot: the sequence's recurrent-state slot.
        samples: True when this chunk reaches the end of the known tokens, so the step samples the
            sequence's next token from the logits of its last row.
    """

    request: Request
    start: int
    token_ids: list[int]
    block_table: list[int]
    state_slot: int
    samples: bool

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def num_new_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def context_len(self) -> int:
        """Cached plus new tokens after this step."""
        return self.start + len(self.token_ids)

    @property
    def is_fresh(self) -> bool:
        """First chunk of the sequence: its state slot must start from zeros."""
        return self.start == 0


@attrs.define
class SchedulerOutput:
    """What one step computes: the plain object crossing scheduler -> model runner.

    Attributes:
        seqs: scheduled sequences, in batch order (running ones first, then newly admitted).
        preempted: ids of requests preempted (back to waiting) while scheduling this step.
        num_batched_tokens: total tokens computed this step.
    """

    seqs: list[ScheduledSeq] = attrs.field(factory=list)
    preempted: list[str] = attrs.field(factory=list)
    num_batched_tokens: int = 0

    @property
    def is_empty(self) -> bool:
        return not self.seqs

    @property
    def is_decode(self) -> bool:
        """Every sequence decodes one token on top of a cached context."""
        return bool(self.seqs) and all(s.num_new_tokens == 1 and s.start > 0 for s in self.seqs)


class Scheduler:
    """Admits, schedules, preempts and retires requests.

    Args:
        config: batch limits (``max_num_seqs``, ``max_num_batched_tokens``, ``prefill_chunk_size``).
        blocks: the KV block manager.
        slots: the recurrent-state slot pool (at least ``max_num_seqs`` slots).
    """

    def __init__(self, config: EngineConfig, blocks: BlockManager, slots: StatePool):
        self.config = config
        self.blocks = blocks
        self.slots = slots
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.num_preemptions = 0

    def add(self, request: Request) -> None:
        request.status = RequestStatus.WAITING
        self.waiting.append(request)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def _chunk(self, request: Request, budget: int) -> int:
        n = min(request.num_tokens - request.num_computed_tokens, budget)
        if self.config.prefill_chunk_size is not None:
            n = min(n, self.config.prefill_chunk_size)
        return n

    def _release(self, request: Request) -> None:
        self.blocks.free(request.request_id)
        self.slots.free(request.request_id)

    def _preempt(self, request: Request) -> None:
        self._release(request)
        request.status = RequestStatus.WAITING
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(request)

    def _scheduled(self, request: Request, n: int) -> ScheduledSeq:
        start = request.num_computed_tokens
        table = self.blocks.allocate(request.request_id, start + n)
        return ScheduledSeq(
            request=request,
            start=start,
            token_ids=request.token_slice(start, start + n),
            block_table=list(table),
            state_slot=self.slots.allocate(request.request_id),
            samples=start + n == request.num_tokens,
        )

    def schedule(self) -> SchedulerOutput:
        """Pick this step's work; allocates blocks and slots, may preempt."""
        out = SchedulerOutput()
        budget = self.config.max_num_batched_tokens
        i = 0
        while i < len(self.running) and budget > 0:
            request = self.running[i]
            n = self._chunk(request, budget)
            end = request.num_computed_tokens + n
            preempted_self = False
            while not self.blocks.can_allocate(request.request_id, end):
                victim = self.running.pop()
                self._preempt(victim)
                out.preempted.append(victim.request_id)
                if victim is request:
                    preempted_self = True
                    break
            if preempted_self:
                break
            out.seqs.append(self._scheduled(request, n))
            budget -= n
            i += 1
        if not out.preempted:
            while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
                request = self.waiting[0]
                n = self._chunk(request, budget)
                if self.slots.num_free_slots == 0 or not self.blocks.can_allocate(request.request_id, n):
                    break
                self.waiting.popleft()
                request.status = RequestStatus.RUNNING
                self.running.append(request)
                out.seqs.append(self._scheduled(request, n))
                budget -= n
        out.num_batched_tokens = self.config.max_num_batched_tokens - budget
        return out

    def update(self, out: SchedulerOutput, sampled: dict[str, int]) -> list[Request]:
        """Record a finished step: advance computed tokens and append sampled ids.

        Args:
            out: the step's schedule.
            sampled: request id -> sampled token id, for every sequence with ``samples``.

        Returns:
            The requests that received a new token, in batch order.
        """
        grew = []
        for seq in out.seqs:
            request = seq.request
            if request.status is not RequestStatus.RUNNING:
                continue
            request.num_computed_tokens = seq.context_len
            if seq.samples:
                request.output_token_ids.append(sampled[request.request_id])
                grew.append(request)
        return grew

    def finish(self, request: Request, reason: str, stop_reason: str | int | None = None) -> None:
        """Retire ``request`` (running or waiting): its blocks and slot return to the pools now."""
        if request.status is RequestStatus.FINISHED:
            return
        if request.status is RequestStatus.RUNNING:
            self.running.remove(request)
        else:
            try:
                self.waiting.remove(request)
            except ValueError:
                pass
        self._release(request)
        request.status = RequestStatus.FINISHED
        request.finish_reason = reason
        request.stop_reason = stop_reason
