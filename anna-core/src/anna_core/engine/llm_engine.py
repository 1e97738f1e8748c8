"""The engine core: add requests, step, get per-step outputs.

One step = schedule -> model runner -> update -> detokenize / stop checks -> outputs. Blocks and
state slots return to their pools the moment a request finishes, fails or is aborted. Not
thread-safe: exactly one thread (the :class:`~anna_core.engine.async_engine.AsyncEngine` loop, or
the caller of :class:`~anna_core.llm.LLM`) drives it.

**Asynchronous scheduling** (``EngineConfig.async_scheduling``, on by default; effective where decode
graphs are captured): a decode step that replays a graph is not waited for. Its requests get a
:data:`~anna_core.engine.request.PENDING` placeholder token, and the *next* call schedules and
launches the following step first (a row whose input token is pending takes it on the device from
the previous replay's sampled ids), then reads the previous step's ids back and processes them
(stop checks, text, outputs) while the device computes. The host's scheduling and output work thus
overlaps the device's step instead of idling it. Outputs come one call later; a request that stops
(EOS, stop string) has computed one extra token, which is discarded; a request that reaches
``max_tokens`` is not scheduled past it. Steps that are not plain graph decodes (prefill, mixed,
logits processors, prompt-cache hits) first read back the step in flight and then run as before.
A model's side outputs (``ModelCapabilities.side_outputs``, e.g. a speech talker's other codebooks) travel with
the ids (:class:`~anna_core.engine.graph_staging.PendingIds`), so its steps overlap too; with
``recompute_holds_last`` a step with a request holding its last token (a recompute after preemption) runs
without overlap (:meth:`LLMEngine._can_overlap`).

The engine holds the step loop and a request's life in it; its collaborators hold the other concepts: a request's
checks before it queues (:mod:`anna_core.engine.intake`: validation, memory admission, the queue limit, Retry-After),
cache sizes (:mod:`anna_core.engine.cache_sizing`), the state restores and captures around a step
(:mod:`anna_core.engine.cache_transfers`), a new token's stop rules and text (:mod:`anna_core.engine.token_outcome`),
the step in flight (:mod:`anna_core.engine.inflight`) and failed steps (:mod:`anna_core.engine.faults`).
"""

from __future__ import annotations

import logging
import secrets
import time
from typing import Any

import attrs
import torch

from anna_core.device import empty_cache
from anna_core.engine.cache_allocator import allocate_caches, reset_residual, residual_bytes
from anna_core.engine.cache_manager import CacheManager
from anna_core.engine.cache_sizing import plan_cache_sizes
from anna_core.engine.cache_transfers import CacheTransfers
from anna_core.engine.checkpoint_plan import CheckpointTarget
from anna_core.engine.config import EngineConfig, default_max_prefill_tokens
from anna_core.engine.detokenizer import IncrementalDetokenizer
from anna_core.engine.faults import FaultInjector, StepFailures, classify_failure, failure_code, failure_message
from anna_core.engine.inflight import Inflight, can_overlap, resolve_pending
from anna_core.engine.intake import RequestIntake, memory_admission_for
from anna_core.engine.logits_processors import LogitsProcessors
from anna_core.engine.memory_admission import DeviceMemoryProbe, MemoryEstimate, MemoryProbe
from anna_core.engine.model_footprint import hidden_size, model_device_bytes, num_params
from anna_core.engine.model_runner import ModelRunner, ModelRunnerOutput, StepPath
from anna_core.engine.outputs import RequestOutput, request_output
from anna_core.engine.request import PENDING, Request
from anna_core.engine.request_validation import RequestValidator
from anna_core.engine.sampler import host_tensor
from anna_core.engine.sampling_params import SamplingParams
from anna_core.engine.scheduler import Scheduler, SchedulerOutput
from anna_core.engine.state_store import StateStore
from anna_core.engine.step_broadcast import StepBroadcaster
from anna_core.engine.stop_checker import StopStringChecker
from anna_core.engine.token_outcome import token_outcome
from anna_core.errors import (
    InvalidRequestError,
)
from anna_core.kv_quant.settings import resolve_kv_quant
from anna_core.layers.attention import check_attention_layers
from anna_core.metrics import EngineMetrics
from anna_core.model import LoadedModel, check_model
from anna_core.multimodal import MultiModalInputs

log = logging.getLogger("anna.engine")


class LLMEngine:
    """Batched generation over one model.

    Args:
        model: a :class:`~anna_core.model.CausalLM` module on ``device``.
        tokenizer: :class:`~anna_core.tokenizer.Tokenizer` or None (then outputs carry token ids
            only and stop strings are refused).
        config: batching and cache settings (with ``max_prefill_tokens`` unset, :attr:`config` is a copy with the
            device's default filled in).
        device / dtype: where the caches live and their dtype.
        eos_token_ids: ids that end every request unless it sets ``ignore_eos``.
        model_max_len: the checkpoint's context limit (``None``: only the config / cache bound it).
        expert_store: the model's :class:`~anna_core.layers.expert_offload.ExpertStore` when its experts are
            offloaded (``LoadedModel.expert_store``): its device bytes count under ``max_device_memory_gib`` and
            its counters appear in :meth:`stats` (``expert_cache``).
        memory_probe: the device's memory for admission (:mod:`anna_core.engine.memory_admission`; default
            :class:`~anna_core.engine.memory_admission.DeviceMemoryProbe` of ``device``; tests pass a static one).
        faults: a :class:`~anna_core.engine.faults.FaultInjector` that tests arm to fail chosen steps.
        broadcaster: the :class:`~anna_core.engine.step_broadcast.StepBroadcaster` told of the device work other
            engines mirror (tensor parallelism's ranks); default: the one-device no-op.

    Raises:
        AnnaError: the model does not declare what :class:`~anna_core.model.CausalLM` requires, an
            attention layer disagrees with its cache group, a sliding-window group's blocks cannot hold
            one sequence's window, or memory admission could admit no request at all
            (:meth:`~anna_core.engine.memory_admission.MemoryAdmission.check_startup`).
    """

    def __init__(self, model: Any, *, tokenizer: Any = None, config: EngineConfig | None = None,
                 device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                 eos_token_ids: list[int] | tuple[int, ...] = (), model_max_len: int | None = None,
                 expert_store: Any = None, memory_probe: MemoryProbe | None = None,
                 faults: FaultInjector | None = None, broadcaster: StepBroadcaster | None = None):
        self.device = torch.device(device)
        self.broadcaster = broadcaster or StepBroadcaster()
        self.expert_store = expert_store
        config = config or EngineConfig()
        if config.max_prefill_tokens is None:
            config = attrs.evolve(config, max_prefill_tokens=default_max_prefill_tokens(self.device.type))
        self.config = config
        self.model = model
        self.tokenizer = tokenizer
        self.dtype = dtype
        self.eos_token_ids = tuple(eos_token_ids)
        check_model(model)
        self.kv_quant = resolve_kv_quant(config.kv_cache_quantization, config.kv_cache_quant_bits,
                                         num_params=num_params(model), supported=model.capabilities.quantized_kv,
                                         residual_len=config.kv_cache_residual_len, key_qjl=config.kv_cache_key_qjl)
        spec = model.cache_spec.with_kv_quant(self.kv_quant)  # the groups as allocated (TurboQuant layouts applied)
        self.cache_spec = spec
        if isinstance(model, torch.nn.Module):
            check_attention_layers(model, spec)
        bs = config.block_size
        sizes = plan_cache_sizes(spec, config, self.device, dtype, model_max_len=model_max_len,
                                 model_device_bytes=self._model_device_bytes,
                                 agree_num_blocks=self.broadcaster.agree_num_blocks)
        num_blocks, num_snapshots = sizes.num_blocks, sizes.num_snapshots
        self.max_model_len = sizes.max_model_len
        self.caches = allocate_caches(spec, num_blocks=num_blocks, block_size=bs, num_slots=config.max_num_seqs,
                                      device=self.device, dtype=dtype)
        self.has_residual = residual_bytes(spec, 1, dtype) > 0
        # snapshots taken inside a prefill pass: the model supports them and a boundary leaves room for a conv state
        in_pass = (num_snapshots > 0 and model.capabilities.state_checkpoints
                   and spec.recurrent.conv_shape[-1] <= config.snapshot_interval)
        # in-pass snapshots get one more entry: the scratch that captured prefills write unreserved ones to
        self.snapshot_store = StateStore(spec, num_snapshots + int(in_pass), self.device, dtype)
        self.prompt_store = StateStore(spec, config.prompt_cache_size, self.device, dtype, residual=True)
        self.transfers = CacheTransfers(self.caches, self.snapshot_store, self.prompt_store, self.broadcaster)
        self.kv = CacheManager(spec, num_blocks, bs, config.max_num_seqs, enable_caching=config.enable_prefix_caching,
                               num_snapshots=num_snapshots, snapshot_interval=config.snapshot_interval)
        self.scheduler = Scheduler(config, self.kv, checkpoints_in_pass=in_pass, max_model_len=self.max_model_len,
                                   hold_last=model.capabilities.recompute_holds_last)
        self._inflight: Inflight | None = None
        target = None
        if self.scheduler.checkpoints_in_pass:
            store = self.snapshot_store
            target = CheckpointTarget(store.conv, store.recurrent, num_snapshots, config.snapshot_interval)
        self.runner = ModelRunner(model, self.caches, self.device, checkpoint_target=target,
                                  logits_processors=LogitsProcessors(tokenizer, model.vocab_size, self.eos_token_ids))
        self.validator = RequestValidator(vocab_size=model.vocab_size, max_model_len=self.max_model_len,
                                          capabilities=model.capabilities,
                                          max_item_tokens=min(config.max_encoder_tokens, config.encoder_cache_tokens),
                                          tokenizer=tokenizer, logits_processors=self.runner.logits_processors)
        self.metrics = EngineMetrics()
        self.faults = faults
        self.failures = StepFailures(config.max_consecutive_step_failures)
        self._failure_counted = -1  # the engine step whose failure was counted last
        self.admission = memory_admission_for(
            spec, config, memory_probe or DeviceMemoryProbe(self.device), dtype=dtype, num_blocks=num_blocks,
            max_model_len=self.max_model_len, max_step_tokens=self.longest_one_step_prompt(),
            vocab_size=model.vocab_size, hidden_size=hidden_size(model), weights_bytes=self._model_device_bytes())
        self.admission.check_startup()  # a configuration that could admit nothing fails here, not with 503s forever
        self.intake = RequestIntake(self.validator, self.admission, self.metrics, self.failures, self.scheduler,
                                    config)
        self._requests: dict[str, Request] = {}
        self._lookup_tokens = [0, 0]  # prompt tokens found in a cache, prompt tokens looked up
        self.num_generated_tokens = 0
        self.num_steps = 0
        self.started = time.perf_counter()

    def _reset_residual(self) -> None:
        """Empty the residual rings (``--kv-cache-residual-len``) of the slots sequences took in this schedule, before
        the step writes them (stream-ordered after any step still in flight)."""
        slots = self.kv.slots.take_assigned()
        if slots and self.has_residual:
            self.broadcaster.residual_reset(slots)
            reset_residual(self.caches, host_tensor(slots, torch.int64, self.device))

    def estimate_memory(self, prompt_token_ids: list[int], params: SamplingParams) -> MemoryEstimate:
        """The device memory a request needs (:class:`~anna_core.engine.memory_admission.MemoryEstimate`)."""
        return self.intake.estimate(prompt_token_ids, params)

    def admit(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams, *,
              busy_check: bool = True) -> None:
        """Memory admission of a request before it is added (thread-safe); :meth:`add_request` with ``admitted=True``
        then takes it, and its estimate is held until it ends.

        Raises:
            EngineDegradedError: the engine is degraded (HTTP 503).
            InvalidRequestError: it can never fit (HTTP 400, code ``insufficient_memory``).
            MemoryUnavailableError: it fits once running requests finish (HTTP 503); only with ``busy_check``.
        """
        self.intake.admit(request_id, prompt_token_ids, params, busy_check=busy_check)

    def admit_group(self, jobs: list[tuple[str, list[int], SamplingParams]]) -> None:
        """:meth:`admit` for the requests of one fan-out together (``(request_id, prompt ids, params)``; all or
        none: :meth:`~anna_core.engine.memory_admission.MemoryAdmission.admit_group`)."""
        self.intake.admit_group(jobs)

    @property
    def degraded(self) -> str | None:
        """Why the engine is degraded (:mod:`anna_core.engine.faults`), or None while it serves."""
        return self.failures.degraded

    def _model_device_bytes(self) -> int:
        """Bytes of the model's tensors on the engine's device (parameters, buffers, the expert cache and scratch
        of offloaded experts): the KV sizing's count on devices where torch keeps none (the CPU), and the weights
        term of memory admission."""
        return model_device_bytes(self.model, self.device, self.expert_store)

    @classmethod
    def from_loaded(cls, loaded: LoadedModel, config: EngineConfig | None = None) -> LLMEngine:
        return cls(loaded.model, tokenizer=loaded.tokenizer, config=config, device=loaded.device,
                   dtype=loaded.dtype, eos_token_ids=loaded.generation.eos_token_ids,
                   model_max_len=loaded.max_model_len, expert_store=loaded.expert_store)

    def longest_one_step_prompt(self) -> int:
        """The most prompt tokens the scheduler computes in one step for a request alone: the step's
        prefill budget, the chunk size when set, and, when prefix caching snapshots the recurrent group's
        state between passes (not inside them), the snapshot interval (prompts are cut at its
        boundaries). The runner captures prefill graphs up to this length (:meth:`ModelRunner.setup`'s
        ``max_prefill_tokens``)."""
        cfg = self.config
        n = cfg.max_prefill_tokens
        if cfg.prefill_chunk_size:
            n = min(n, cfg.prefill_chunk_size)
        if self.scheduler.capture_snapshots and not self.scheduler.checkpoints_in_pass:
            n = min(n, cfg.snapshot_interval)
        return n

    # -- requests ---------------------------------------------------------------------------

    def validate_request(self, prompt_token_ids: list[int], params: SamplingParams,
                         multimodal: MultiModalInputs | None = None) -> None:
        """Check a request against the engine's limits (thread-safe: reads only settings).

        Raises:
            InvalidRequestError: empty or too long prompt, bad prompt or stop token ids, stop strings without a
                tokenizer, media the model does not take or that do not fit the prompt or the encoder
                budget (:func:`~anna_core.multimodal.check_multimodal`).
        """
        self.intake.validate(prompt_token_ids, params, multimodal)

    def add_request(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams | None = None,
                    *, arrival_time: float | None = None, enforce_queue_limit: bool = True,
                    validated: bool = False, multimodal: MultiModalInputs | None = None, admitted: bool = False) -> None:
        """Queue a request.

        Args:
            multimodal: its media (placeholder ranges in ``prompt_token_ids``) and positions, or None.
            enforce_queue_limit: refuse it when ``max_waiting_requests`` wait already (the
                :class:`~anna_core.engine.async_engine.AsyncEngine` checks at its front door and
                passes False).
            validated: the caller ran :meth:`validate_request` on these very arguments already (the
                :class:`~anna_core.engine.async_engine.AsyncEngine` does, on the caller's thread), so a
                request is validated once.
            admitted: the caller ran :meth:`admit` for it (the async engine's front door, which also refuses what
                fits only later); otherwise it is admitted here without that check (it queues).

        Raises:
            InvalidRequestError: see :meth:`validate_request`, ``request_id`` is in use, or the request can never
                fit the device's memory (code ``insufficient_memory``).
            QueueFullError: the waiting queue is full (HTTP 429).
            EngineDegradedError: the engine is degraded.
        """
        params = params or SamplingParams()
        prompt_token_ids = list(prompt_token_ids)
        if not validated:
            self.validate_request(prompt_token_ids, params, multimodal)
        if request_id in self._requests:
            raise InvalidRequestError(f"request id {request_id!r} is already in use")
        self.intake.check_open()  # also a request admitted just before the engine degraded
        if enforce_queue_limit:
            self.intake.check_queue()
        if not admitted:
            self.admit(request_id, prompt_token_ids, params, busy_check=False)
        seed = params.seed if params.seed is not None else secrets.randbits(63)
        req = Request(request_id, prompt_token_ids, params, eos_token_ids=self.eos_token_ids,
                      seed=seed, arrival_time=arrival_time, multimodal=multimodal)
        if self.tokenizer is not None:
            req.detokenizer = IncrementalDetokenizer(self.tokenizer, prompt_token_ids, params.skip_special_tokens)
            req.stop_checker = StopStringChecker(params)
        req.grammar = self.runner.logits_processors.new_state(params)
        req.bad_word_ids = self.runner.logits_processors.bad_word_ids(params)
        self._requests[request_id] = req
        self.scheduler.add(req)
        self.metrics.on_request_arrived(request_id, req.arrival_time)

    def retry_after_s(self, num_waiting: int | None = None) -> int:
        """Seconds until ``num_waiting`` queued requests (default: those waiting now) are likely
        admitted, from the recent finish rate; 1 to 60."""
        return self.intake.retry_after_s(num_waiting)

    def abort_request(self, request_id: str) -> RequestOutput | None:
        """End a request now (finish reason ``"abort"``); None if it is unknown or already done."""
        req = self._requests.get(request_id)
        if req is None:
            return None
        return self._finish(req, "abort", None, "", [])

    def has_unfinished(self) -> bool:
        """Requests remain, or a launched step is still to be read back."""
        return self.scheduler.has_unfinished() or self._inflight is not None

    @property
    def num_unfinished(self) -> int:
        return len(self._requests)

    # -- the step ---------------------------------------------------------------------------

    def next_wakeup(self) -> float | None:
        """Seconds until :meth:`step` may have work (0: now), None when there is nothing to do."""
        return 0.0 if self._inflight is not None else self.scheduler.next_wakeup()

    def step(self) -> list[RequestOutput]:
        """Run one batched step; returns an output for every request that produced a token,
        finished, timed out or failed in it (with asynchronous scheduling, the tokens of a graph
        decode step arrive from the next call)."""
        results = self._expire()
        out = self.scheduler.schedule()
        self._reset_residual()
        if self.runner.encoder is not None:
            self.runner.encoder.drop(out.free_encoder_hashes)
        for _ in out.preempted:
            self.metrics.on_preemption()
        for hit, total in out.cache_lookups:
            self.metrics.on_prefix_cache_lookup(hit, total)
            self._lookup_tokens[0] += hit
            self._lookup_tokens[1] += total
        if out.is_empty:
            results += self._read_back()
            self._set_gauges()
            return results
        self.num_steps += 1
        result: ModelRunnerOutput | None = None
        try:
            if self.faults is not None:
                self.faults.check(self.num_steps)
            self.broadcaster.before_step(out)
            self.transfers.restore(out)
            if self._can_overlap(out):
                result = self.runner.execute(out, prev_rows=self._inflight.rows if self._inflight else None,
                                             wait=False, path=StepPath.DECODE_GRAPH)
            else:
                results += self._read_back()
                resolve_pending(out)
                result = self.runner.execute(out) if out.seqs else ModelRunnerOutput(StepPath.EAGER)
                if out.prompt_hits:
                    result.sampled.update(self._sample_prompt_hits(out))
                    if self.model.capabilities.side_outputs:  # (what the hit's slot holds: no step computed it)
                        hits = out.prompt_hits
                        result.side_outputs.update(self.runner.side_outputs_of([h.request_id for h in hits],
                                                                               [h.state_slot for h in hits]))
        except Exception as exc:  # the model failed: fail this step's requests, keep serving others
            log.exception("engine step failed")
            self.scheduler.abandon(out)
            results += self._read_back()  # a step launched before this one: drained and delivered first
            kind = classify_failure(exc)
            prefill = {s.request_id for s in out.seqs if s.start < s.request.num_prompt_tokens}
            ids = [s.request_id for s in out.seqs] + [h.request_id for h in out.prompt_hits]
            if prefill and kind != "device":
                # the step computed prompt tokens: only those requests fail; the others (decodes, prompt-cache
                # hits) are preempted by recompute (their KV this step may have partly written is dropped) and
                # resume, their output unchanged
                for rid in ids:
                    req = self._requests.get(rid)
                    if rid not in prefill and req is not None and not req.finished:
                        req.drop_pending()
                        self.scheduler.preempt(req)
                        self.metrics.on_preemption()
                ids = [i for i in ids if i in prefill]
            results += [self.fail_request(i, failure_message(exc), code=failure_code(exc)) for i in ids
                        if i in self._requests]
            results += self._step_failed(exc, new_prompts=bool(prefill))
            self._set_gauges()
            return results
        self.failures.succeeded(decodes=any(s.start >= s.request.num_prompt_tokens for s in out.seqs))
        if result.pending is not None:
            results += self._read_back()
            result.sampled = {s.request_id: PENDING for s in out.seqs}
            grown = self.scheduler.update(out, result)
            self._inflight = Inflight(result.pending, grown, {s.request_id: i for i, s in enumerate(out.seqs)})
            self._set_gauges()
            return results
        grown = self.scheduler.update(out, result)
        self._capture(out, result.prompt_logits)
        if self.model.capabilities.side_outputs:
            for req in grown:  # a recompute's inputs (ForwardBatch.side_outputs), and the output's (_process)
                req.side_outputs.append(result.side_outputs[req.request_id])
        results += self._process_all(grown)
        if self.runner.encoder is not None:  # the step was read back: its encodes' device time, without a wait
            self.runner.encoder.settle()
        self._set_gauges()
        return results

    def _can_overlap(self, out: SchedulerOutput) -> bool:
        """Whether ``out`` may be launched without waiting: asynchronous scheduling is on, the runner runs
        it as a captured decode graph with the sampler inside, no prompt-cache or snapshot work
        surrounds it, and no request of it holds its last token (``recompute_holds_last``: a held token is
        never a pending one; such a step, a recompute's, samples nothing and never replays a decode graph)."""
        return self.config.async_scheduling and can_overlap(out, self.runner.plan)

    def _read_back(self) -> list[RequestOutput]:
        """Wait for the step in flight (if any), put its ids in place of the placeholders and
        process them; requests that ended meanwhile are skipped."""
        inflight, self._inflight = self._inflight, None
        if inflight is None:
            return []
        live = inflight.live()
        try:
            ids = inflight.ids.tolist()
            side = inflight.ids.side_outputs()
        except Exception as exc:  # the device step failed
            log.exception("reading back a launched step failed")
            failed = [self.fail_request(r.request_id, failure_message(exc), code=failure_code(exc))
                      for r in live if r.request_id in self._requests]
            return failed + self._step_failed(exc, new_prompts=False)
        inflight.fill(live, ids, side)
        return self._process_all(live)

    def _process_all(self, requests: list[Request]) -> list[RequestOutput]:
        results = []
        for req in requests:
            try:
                results.append(self._process(req))
            except Exception as exc:  # e.g. the tokenizer failed on this request's ids
                log.exception("output processing failed for %s", req.request_id)
                results.append(self.fail_request(req.request_id, f"{type(exc).__name__}: {exc}"))
        return results

    def _step_failed(self, exc: BaseException, *, new_prompts: bool) -> list[RequestOutput]:
        """After a failed step's own requests were failed: an out-of-memory empties the allocator's cache; a lost
        device or too many failures in a row degrade the engine, failing every request it still holds.

        A failure counts once per engine step (a launched step that fails to read back and the step that
        drains it are one failure); ``new_prompts``: the failed step computed prompt tokens (see
        :meth:`~anna_core.engine.faults.StepFailures.failed`)."""
        kind = classify_failure(exc)
        if kind == "oom":
            empty_cache(self.device)
        if self._failure_counted == self.num_steps:  # this engine step's failure was counted already
            if kind != "device" or self.degraded is not None:
                return []
        self._failure_counted = self.num_steps
        was_degraded = self.degraded is not None
        reason = self.failures.failed(exc, new_prompts=new_prompts)
        self.metrics.on_step_failed(kind, reason is not None)
        if reason is None or was_degraded:
            return []
        log.error("the engine is degraded and takes no more requests: %s", reason)
        return [self.fail_request(rid, f"the engine is degraded: {reason}", code="engine_degraded")
                for rid in list(self._requests)]

    def _expire(self) -> list[RequestOutput]:
        """Fail requests older than ``request_timeout_s`` (requests are kept in arrival order)."""
        timeout = self.config.request_timeout_s
        if not timeout:
            return []
        now = time.perf_counter()
        expired = []
        for req in self._requests.values():
            if now - req.arrival_time <= timeout:
                break
            expired.append(req.request_id)
        return [self.fail_request(rid, f"the request timed out after {timeout:g} s (request_timeout_s)")
                for rid in expired]

    def _sample_prompt_hits(self, out: SchedulerOutput) -> dict[str, int]:
        """First tokens of prompt-cache hits, from the stored last-row logits (one host sync)."""
        requests = [h.request for h in out.prompt_hits]
        ids = self.runner.sample_rows(self.transfers.hit_logits(out), requests)
        return {r.request_id: t for r, t in zip(requests, ids)}

    def _capture(self, out: SchedulerOutput, prompt_logits: dict[str, torch.Tensor]) -> None:
        """The state copies :meth:`Scheduler.update` asked for (:meth:`CacheTransfers.capture`); a prompt whose
        logits row the runner did not keep (processed logits) loses its prompt-cache entry."""
        for request_id in self.transfers.capture(out, prompt_logits):
            self.scheduler.forget_prompt(self._requests[request_id])

    def _set_gauges(self) -> None:
        self.metrics.set_gauges(len(self.scheduler.running), len(self.scheduler.waiting),
                                self.kv.num_used_blocks, self.kv.num_blocks,
                                self.kv.slots.num_used_slots, self.kv.slots.num_slots)

    def fail_request(self, request_id: str, message: str, *, code: str | None = None) -> RequestOutput:
        """End a request with finish reason ``"error"`` and ``message``; ``code`` (``RequestOutput.error_code``):
        ``"insufficient_memory"`` or ``"engine_degraded"`` say the server may answer the client 503 (retry)."""
        req = self._requests[request_id]
        req.error = message
        req.error_code = code
        return self._finish(req, "error", None, "", [])

    def _process(self, req: Request) -> RequestOutput:
        """Stop checks and text for the token just appended to ``req``."""
        token = req.output_token_ids[-1]
        self.num_generated_tokens += 1
        now = time.perf_counter()
        if req.first_token_time is None:
            req.first_token_time = now
            self.metrics.on_first_token(req.request_id, now)
        else:
            self.metrics.on_token(req.request_id, now)
        # the step's side output of this token (delivered into req.side_outputs with it: step, _read_back)
        side: list[Any] = req.side_outputs[-1:] if self.model.capabilities.side_outputs else []
        outcome = token_outcome(req, self.max_model_len)
        reason, stop_reason, delta = outcome.finish_reason, outcome.stop_reason, outcome.delta
        if reason is not None:
            return self._finish(req, reason, stop_reason, delta, [token], side)
        return request_output(req, delta, [token], side)

    def _finish(self, req: Request, reason: str, stop_reason: str | int | None, delta: str,
                delta_ids: list[int], side_outputs: list[Any] | None = None) -> RequestOutput:
        req.drop_pending()  # ended before its launched step was read back: that token is discarded
        self.scheduler.finish(req, reason, stop_reason)
        if self.runner.encoder is not None:  # encoder outputs only it held go now, not at the next step
            self.runner.encoder.drop(self.scheduler.encoder_cache.take_freed())
        req.finished_time = time.perf_counter()
        del self._requests[req.request_id]
        self.intake.finished(req.request_id, req.finished_time)
        self.metrics.on_request_finished(req.request_id, req.finished_time, req.num_prompt_tokens,
                                         len(req.output_token_ids), req.num_cached_tokens, reason)
        return request_output(req, delta, delta_ids, side_outputs)

    def stats(self) -> dict[str, Any]:
        """Counters for ``/healthz`` (read them on the engine thread), and how steps run, the same for
        every family: the caches' (:meth:`CacheManager.report`: ``paged_kv``, ``prefix_caching`` on as served
        (asked for, and a recurrent model has snapshot room), blocks and slots), ``graphs`` (:meth:`ModelRunner.graph_report`), ``lm_head_path``
        (:meth:`ModelRunner.head_report`: whether steps take the fused top-k LM head, and how many did); with offloaded
        experts also ``expert_cache`` (:meth:`~anna_core.layers.expert_offload.ExpertStore.report`: hit rate, hits,
        misses, bytes copied, cached experts per layer, ...); for a model that takes media also ``encoder``
        (:meth:`~anna_core.engine.encoder_outputs.EncoderOutputs.report` and the encoder cache's
        ``cache_tokens_used`` / ``cache_tokens_total``)."""
        extra = {"expert_cache": self.expert_store.report()} if self.expert_store is not None else {}
        if self.runner.encoder is not None:
            cache = self.scheduler.encoder_cache
            extra["encoder"] = self.runner.encoder.report() | {"cache_tokens_used": cache.num_used,
                                                                "cache_tokens_total": cache.capacity}
        return extra | self.kv.report() | {
            "graphs": self.runner.graph_report(),
            "lm_head_path": self.runner.head_report(),
            "running": len(self.scheduler.running),
            "waiting": len(self.scheduler.waiting),
            "tokens_generated": self.num_generated_tokens,
            "preemptions": self.scheduler.num_preemptions,
            "prefix_cache_hit_rate": (self._lookup_tokens[0] / self._lookup_tokens[1]
                                      if self._lookup_tokens[1] else None),
            "snapshots_used": len(self.scheduler.snapshots),
            "snapshots_total": self.scheduler.snapshots.capacity,
            "prompt_cache_entries": len(self.scheduler.prompt_cache or ()),
            "retry_after_s": self.retry_after_s(),
            "memory_admission": self.admission.report(),
            "step_failures": self.failures.report(),
            "degraded": self.degraded,
            "steps": self.num_steps,
            "max_model_len": self.max_model_len,
            "uptime_s": time.perf_counter() - self.started,
        }
