"""The scheduler: which requests compute which tokens each step (pure Python, no torch).

One step, in order (knobs in :class:`~anna_core.engine.config.EngineConfig`):

1. **Decodes** of running requests, one token each, least recently scheduled first, while the
   cached tokens they read stay within ``max_decode_tokens`` (the first always runs).
2. **Overdue admissions** (fairness): waiting requests older than ``max_queue_wait_ms`` are
   admitted before the running batch continues its prefills.
3. **Prefill chunks** of running requests, oldest first, under the step's prefill budget.
4. **Admissions**, first come first served, while sequences, state slots, KV blocks and prefill
   budget remain. A busy engine holds new arrivals back for up to ``batch_wait_ms`` (unless a full
   batch is waiting) so that their prefills share a step; an idle engine admits at once.

An admission first looks up the caches: the prompt cache (an exact repeat samples its first token
from stored logits, computing nothing), else the prefix cache, which resumes at the largest point every
cache group can serve (:meth:`~anna_core.engine.cache_manager.CacheManager.prefix_hit`: shared KV blocks;
with a recurrent group only at a recurrent-state snapshot). The recurrent group's state is snapshotted
at every ``snapshot_interval`` prompt tokens. With ``checkpoints_in_pass`` (the model takes snapshots
inside a prefill pass, :mod:`anna_core.layers.state_checkpoints`) a chunk that starts at a snapshot
boundary spans the following ones, each reserved in the snapshot index when scheduled and committed by
:meth:`update`; a chunk cut short by the budget ends at a boundary. Otherwise (and for a chunk starting
between boundaries) chunks end at the next boundary, and :meth:`update` asks the engine to copy the
state there after the step.

**Media** (:mod:`anna_core.multimodal`): a chunk covering placeholders of a medium whose encoder output
is not cached gets it encoded in its step, within the step's encoder budget; a medium that does not fit cuts
the chunk before it (:mod:`anna_core.engine.media_schedule`).

When a running request needs a KV block and none is free, prompt-cache entries are dropped first,
then the newest running request not yet scheduled this step is preempted by recompute
(:mod:`anna_core.engine.request_queues`: its blocks and slot are freed and it goes back to the front of
the waiting queue, its output unchanged when resumed). With ``hold_last`` its last generated token is
held back: the recompute stops before it without sampling, and the step that reaches it puts the token back
(no new output), to be decoded next. No request is admitted in a step that preempted. The step's token
budgets and each request's chunk are :mod:`anna_core.engine.step_budget`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from anna_core.engine.cache_manager import CacheManager
from anna_core.engine.config import EngineConfig
from anna_core.engine.encoder_cache import EncoderCacheManager
from anna_core.engine.media_schedule import MediaSchedule
from anna_core.engine.request import Request, RequestStatus
from anna_core.engine.request_queues import RequestQueues
from anna_core.engine.sched_output import (
    Capture,
    ModelRunnerOutput,
    PromptHit,
    ScheduledSeq,
    SchedulerOutput,
    StepPath,
)
from anna_core.engine.state_snapshots import PromptCache
from anna_core.engine.step_budget import StepBudget, remaining
from anna_core.errors import AnnaError

__all__ = ["Capture", "ModelRunnerOutput", "PromptHit", "ScheduledSeq", "Scheduler", "SchedulerOutput", "StepPath"]


class Scheduler:
    """Admits, schedules, preempts and retires requests.

    Args:
        config: scheduler knobs and cache settings (its ``snapshot_interval`` must be the cache manager's).
        kv: every cache group's bookkeeping (its ``enable_caching`` turns the prefix cache on; its slot
            pool holds at least ``max_num_seqs`` slots).
        checkpoints_in_pass: the model snapshots the recurrent state inside a prefill pass, so chunks
            may span snapshot boundaries (see the module doc).
        max_model_len: the longest sequence served (the engine's capped context limit), or None.
        hold_last: a preempted request's recompute stops before its last generated token (see the module doc).
        clock: seconds, the clock of ``Request.arrival_time`` (``time.perf_counter``).

    Raises:
        AnnaError: ``config.max_prefill_tokens`` is unset (the engine sets it for its device first).
    """

    def __init__(self, config: EngineConfig, kv: CacheManager, *, checkpoints_in_pass: bool = False,
                 max_model_len: int | None = None, hold_last: bool = False,
                 clock: Callable[[], float] = time.perf_counter):
        if config.max_prefill_tokens is None:
            raise AnnaError("max_prefill_tokens is unset: give it, or let the engine choose it for its device "
                            "(anna_core.engine.config.default_max_prefill_tokens)")
        self.config = config
        self.kv = kv
        self.slots = kv.slots
        self.snapshots = kv.snapshots
        self.clock = clock
        self.queues = RequestQueues(hold_last=hold_last)
        self.waiting = self.queues.waiting  # the queues' own deque and list: admission order, running batch
        self.running = self.queues.running
        self.num_preemptions = 0
        self.num_steps = 0
        self.max_model_len = max_model_len
        # an exact repeat computes nothing: its slot's residual rings (--kv-cache-residual-len) are restored with its
        # state from the entry (StateStore)
        self.prompt_cache = PromptCache(config.prompt_cache_size) if config.prompt_cache_size else None
        self.capture_snapshots = kv.capture_snapshots
        self.checkpoints_in_pass = self.capture_snapshots and checkpoints_in_pass
        self.budget = StepBudget(config, kv, capture_snapshots=self.capture_snapshots,
                                 checkpoints_in_pass=self.checkpoints_in_pass)
        self.encoder_cache = EncoderCacheManager(config.encoder_cache_tokens)
        self.media = MediaSchedule(self.encoder_cache)

    # -- queue --------------------------------------------------------------------------------

    def add(self, request: Request) -> None:
        self.queues.add(request)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def next_wakeup(self) -> float | None:
        """Seconds until :meth:`schedule` has work (0: now), or None with nothing to do.

        Work is always ready while anything is unfinished: a busy engine keeps stepping its running
        requests while arrivals are held back by ``batch_wait_ms``, and an idle one admits at once.
        The engine thread sleeps on its condition (no polling) only when this is None or positive.
        """
        return 0.0 if self.running or self.waiting else None

    # -- budgets ------------------------------------------------------------------------------

    def budgets(self) -> tuple[int, int]:
        """This step's (prefill token budget, decode read budget; 0 = unlimited):
        :meth:`~anna_core.engine.step_budget.StepBudget.budgets` of the running requests."""
        return self.budget.budgets(self.running)

    def _chunk(self, request: Request, budget: int, start: int | None = None) -> int:
        """Tokens of ``request`` to compute this step from ``start`` (default: its cached count), cut before a
        medium whose encoder output does not fit the step."""
        start = request.num_computed_tokens if start is None else start
        n = self.budget.chunk(request, budget, start, len(self.running))
        return self.media.limit(request, start, n)

    # -- the step -----------------------------------------------------------------------------

    def schedule(self, now: float | None = None) -> SchedulerOutput:
        """Pick this step's work; allocates blocks and slots, may preempt (see module doc)."""
        now = self.clock() if now is None else now
        self.num_steps += 1
        out = SchedulerOutput()
        prefill_budget, decode_budget = self.budgets()
        self.media.start_step(self.config.max_encoder_tokens)
        busy = bool(self.running)
        scheduled: set[str] = set()

        decodes = sorted((r for r in self.running if remaining(r) == 1), key=lambda r: r.last_scheduled)
        read = 0
        for request in decodes:
            if request.status is not RequestStatus.RUNNING:
                continue  # preempted as a victim in this loop
            if request.reached_length(self.max_model_len):
                continue  # its last token is still in flight; it ends when read back
            ctx = request.num_computed_tokens + 1
            if decode_budget and read and read + ctx > decode_budget:
                continue
            if not self.media.limit(request, ctx - 1, 1):
                continue  # the last prompt token is a placeholder whose medium does not fit this step
            if not self._ensure_blocks(request, ctx, out, scheduled):
                continue
            self._schedule(request, 1, out, scheduled)
            read += ctx

        max_wait = self.config.max_queue_wait_ms
        if max_wait and not out.preempted:
            prefill_budget = self._admit(out, prefill_budget, scheduled, now,
                                         overdue=lambda r: (now - r.arrival_time) * 1000.0 >= max_wait)

        for request in [r for r in self.running if remaining(r) > 1]:
            if prefill_budget <= 0:
                break
            if request.status is not RequestStatus.RUNNING or request.request_id in scheduled:
                continue
            n = self._chunk(request, prefill_budget)
            if n == 0:
                continue
            if not self._ensure_blocks(request, request.num_computed_tokens + n, out, scheduled):
                continue
            self._schedule(request, n, out, scheduled)
            prefill_budget -= n

        if not out.preempted and (not busy or self._admission_open(now)):
            self._admit(out, prefill_budget, scheduled, now)
        out.num_batched_tokens = sum(s.num_new_tokens for s in out.seqs)
        out.free_encoder_hashes = self.encoder_cache.take_freed()
        return out

    def _ensure_blocks(self, request: Request, num_tokens: int, out: SchedulerOutput, scheduled: set[str]) -> bool:
        """Make room for ``request`` to cover ``num_tokens``: drop prompt-cache entries, then preempt
        the newest running request not scheduled yet (possibly ``request`` itself: False)."""
        rid = request.request_id
        while not self.kv.can_allocate(rid, num_tokens):
            if self._drop_prompt_entry():
                continue
            victim = next((r for r in reversed(self.running) if r.request_id not in scheduled and r is not request),
                          request)
            self._preempt(victim)
            out.preempted.append(victim.request_id)
            if victim is request:
                return False
        return True

    def _drop_prompt_entry(self) -> bool:
        entry = self.prompt_cache.pop_lru() if self.prompt_cache is not None else None
        if entry is None:
            return False
        self.kv.unpin(entry.blocks)
        return True

    def _schedule(self, request: Request, n: int, out: SchedulerOutput, scheduled: set[str],
                  restore: int | None = None) -> None:
        start = request.num_computed_tokens
        end = start + n
        rid = request.request_id
        tables = self.kv.allocate(rid, end)
        p = request.num_prompt_tokens
        out.seqs.append(ScheduledSeq(
            request=request, start=start, token_ids=request.token_slice(start, end), block_tables=tables,
            state_slot=self.slots.allocate(rid), samples=end == request.num_tokens and request.held_token is None,
            restore_snapshot=restore,
            capture_snapshot=self.capture_snapshots and end <= p and end % self.config.snapshot_interval == 0,
            capture_prompt=(self.prompt_cache is not None and end == p and not request.output_token_ids
                            and request.held_token is None and request.prompt_key not in self.prompt_cache),
            checkpoints=self._reserve_checkpoints(request, start, min(end - 1, p)) if self.checkpoints_in_pass else [],
        ))
        scheduled.add(rid)
        self.media.acquire(out.seqs[-1], out)

    def _reserve_checkpoints(self, request: Request, start: int, last: int) -> list[tuple[int, int, bytes]]:
        """Pending snapshot entries for the boundaries ``start < b <= last`` of ``request`` (those whose
        prefix is held already, or that find no room, are skipped): ``(b, index, key)`` ascending. The
        deepest are reserved first: a pool too small for all keeps them, as LRU does between passes."""
        interval, bs = self.config.snapshot_interval, self.kv.block_size
        first = (start // interval + 1) * interval
        if first > last:
            return []
        hashes = request.hashes_upto(last // bs, bs)
        points = []
        for b in range(last // interval * interval, first - 1, -interval):
            key = hashes[b // bs - 1]
            idx = self.snapshots.reserve(key, pending=True)
            if idx is not None:
                points.append((b, idx, key))
        return points[::-1]

    def abandon(self, out: SchedulerOutput) -> None:
        """The step of ``out`` failed: release its pending snapshot entries (nothing was recorded)."""
        for seq in out.seqs:
            for _, _, key in seq.checkpoints:
                self.snapshots.release(key)

    # -- admission ----------------------------------------------------------------------------

    def _admission_open(self, now: float) -> bool:
        """Whether a busy engine admits now: ``batch_wait_ms`` passed for the oldest waiting
        request, or enough requests wait to fill the batch."""
        wait = self.config.batch_wait_ms
        if not wait or not self.waiting:
            return True
        if (now - self.waiting[0].arrival_time) * 1000.0 >= wait:
            return True
        return len(self.waiting) >= self.config.max_num_seqs - len(self.running)

    def _admit(self, out: SchedulerOutput, budget: int, scheduled: set[str], now: float,
               overdue: Callable[[Request], bool] | None = None) -> int:
        """Admit waiting requests first come first served (only overdue ones if ``overdue`` is
        given) while they fit; returns the prefill budget left."""
        while self.waiting and len(self.running) < self.config.max_num_seqs and self.slots.num_free_slots:
            request = self.waiting[0]
            if overdue is not None and not overdue(request):
                break
            used = self._try_admit(request, budget, out, scheduled)
            if used is None:
                break
            budget -= used
        return budget

    def _try_admit(self, request: Request, budget: int, out: SchedulerOutput, scheduled: set[str]) -> int | None:
        """Admit ``request`` if it fits; returns the prefill tokens it takes, None if it does not fit."""
        first = not request.admitted_once
        if self._try_prompt_hit(request, out, scheduled, first):
            return 0
        if budget <= 0:
            return None
        # a request still recording its prompt logprobs computes its whole prompt (engine.prompt_logprobs)
        hit = self.kv.miss() if request.recording_prompt_logprobs else self.kv.prefix_hit(request)
        cached = hit.num_tokens
        n = self._chunk(request, budget, start=cached)
        if n == 0:
            return None  # its next medium does not fit this step's encoder budget
        while not self.kv.fits(hit.shared, cached + n):
            if not self._drop_prompt_entry():
                return None
        self.queues.start_running()
        self.kv.share(request.request_id, hit.shared)
        request.num_computed_tokens = cached
        if first:
            request.num_cached_tokens = cached
            out.cache_lookups.append((cached, request.num_prompt_tokens))
        self._schedule(request, n, out, scheduled, restore=hit.snapshot)
        return n

    def _try_prompt_hit(self, request: Request, out: SchedulerOutput, scheduled: set[str], first: bool) -> bool:
        if (self.prompt_cache is None or request.output_token_ids or request.held_token is not None
                or request.recording_prompt_logprobs):
            return False
        entry = self.prompt_cache.get(request.prompt_key)
        if entry is None:
            return False
        p = request.num_prompt_tokens
        if not self.kv.prompt_hit_fits(p):
            return False
        rid = request.request_id
        self.queues.start_running()
        tables, copies = self.kv.share_prompt(rid, entry.blocks, p)
        request.num_computed_tokens = p
        if first:
            request.num_cached_tokens = p
            out.cache_lookups.append((p, p))
        out.prompt_hits.append(PromptHit(request=request, entry=entry, state_slot=self.slots.allocate(rid),
                                         block_tables=tables, tail_copies=copies))
        scheduled.add(rid)
        return True

    # -- after the step -----------------------------------------------------------------------

    def update(self, out: SchedulerOutput, result: ModelRunnerOutput) -> list[Request]:
        """Record a finished step: advance computed tokens, append sampled ids, register full
        blocks in the prefix cache and list the state captures in ``out.captures``.

        Args:
            out: the step's schedule.
            result: what the runner produced for it; its ``sampled`` maps every sequence with ``samples``
                and every prompt hit to its token id (:data:`~anna_core.engine.request.PENDING` for a
                launched step not read back yet).

        Returns:
            The requests that received a new token, in batch order.
        """
        sampled = result.sampled
        grew = []
        bs = self.kv.block_size
        for seq in out.seqs:
            for _, _, key in seq.checkpoints:  # written by the pass, whatever became of the request since
                self.snapshots.commit(key)
            request = seq.request
            if request.status is not RequestStatus.RUNNING:
                continue
            request.num_computed_tokens = end = seq.context_len
            request.last_scheduled = self.num_steps
            rid = request.request_id
            if self.kv.enable_caching:
                full = end // bs
                hashes = request.hashes_upto(full, bs)
                self.kv.register(rid, hashes, seq.start // bs, full)
                if seq.capture_snapshot:
                    idx = self.snapshots.reserve(hashes[end // bs - 1])
                    if idx is not None:
                        out.captures.append(Capture("snapshot", seq.state_slot, idx, rid))
            if seq.capture_prompt and self.prompt_cache is not None:
                key = request.prompt_key
                if key not in self.prompt_cache:
                    entry, evicted = self.prompt_cache.insert(key, self.kv.entry_blocks(rid, end))
                    self.kv.pin(entry.blocks)
                    if evicted is not None:
                        self.kv.unpin(evicted.blocks)
                    out.captures.append(Capture("prompt", seq.state_slot, entry.store_idx, rid))
            self.kv.computed(rid, end)
            if seq.media:
                self.media.release_done(request)
            if seq.samples:
                request.output_token_ids.append(sampled[rid])
                grew.append(request)
            elif request.held_token is not None and end == request.num_tokens:
                self.queues.put_back(request)  # recomputed up to its held token: decoded next, reported already
        for hit in out.prompt_hits:
            request = hit.request
            if request.status is RequestStatus.RUNNING:
                request.last_scheduled = self.num_steps
                request.output_token_ids.append(sampled[request.request_id])
                grew.append(request)
        return grew

    def forget_prompt(self, request: Request) -> None:
        """Drop ``request``'s prompt-cache entry (its capture could not be completed)."""
        entry = self.prompt_cache.remove(request.prompt_key) if self.prompt_cache is not None else None
        if entry is not None:
            self.kv.unpin(entry.blocks)

    # -- retiring -----------------------------------------------------------------------------

    def _release(self, request: Request) -> None:
        self.kv.free(request.request_id)
        self.encoder_cache.release_all(request.request_id)

    def preempt(self, request: Request) -> None:
        """Preempt a running request by recompute (the engine's requeue of a failed step's innocent requests)."""
        if request.status is RequestStatus.RUNNING:
            self._preempt(request)

    def _preempt(self, request: Request) -> None:
        self._release(request)
        self.queues.requeue(request)
        self.num_preemptions += 1

    def finish(self, request: Request, reason: str, stop_reason: str | int | None = None) -> None:
        """Retire ``request`` (running or waiting): its blocks and slot return to the pools now."""
        if request.status is RequestStatus.FINISHED:
            return
        self.queues.remove(request)
        self._release(request)
        if request.held_token is not None:
            self.queues.put_back(request)
        request.status = RequestStatus.FINISHED
        request.finish_reason = reason
        request.stop_reason = stop_reason
