"""The engine's front door: the checks a request passes before it queues (validation, memory admission, the waiting
queue's limit, the engine not degraded) and the ``Retry-After`` its refusals carry.

:class:`RequestIntake` holds the checks; :class:`~anna_core.engine.llm_engine.LLMEngine` exposes them
(``validate_request``, ``admit``, ``admit_group``, ``estimate_memory``, ``retry_after_s``). Validation and admission
may run on callers' threads (they read settings, and :class:`~anna_core.engine.memory_admission.MemoryAdmission`
locks its own state); the queue check and :meth:`RequestIntake.finished` run on the engine's thread.
"""

from __future__ import annotations

import contextlib
import math
from collections import deque
from collections.abc import Iterator

import torch

from anna_core.cache_spec import CacheSpec
from anna_core.engine.config import EngineConfig
from anna_core.engine.faults import StepFailures
from anna_core.engine.memory_admission import (
    MemoryAdmission,
    MemoryEstimate,
    MemoryEstimator,
    MemoryPolicy,
    MemoryProbe,
)
from anna_core.engine.request_validation import RequestValidator
from anna_core.engine.sampling_params import SamplingParams
from anna_core.engine.scheduler import Scheduler
from anna_core.errors import EngineDegradedError, InvalidRequestError, MemoryUnavailableError, QueueFullError
from anna_core.metrics import EngineMetrics
from anna_core.multimodal import MultiModalInputs


def memory_admission_for(spec: CacheSpec, config: EngineConfig, probe: MemoryProbe, *, dtype: torch.dtype,
                         num_blocks: list[int], max_model_len: int, max_step_tokens: int, vocab_size: int,
                         hidden_size: int, weights_bytes: int) -> MemoryAdmission:
    """The :class:`~anna_core.engine.memory_admission.MemoryAdmission` of an engine's pools as allocated: an
    attention group's ``num_blocks`` blocks (``spec.attention_groups`` order), a recurrent group's
    ``max_num_seqs`` slots; ``max_step_tokens``: the most prompt tokens one step computes for a request alone;
    ``weights_bytes``: the model's bytes on the device."""
    estimator = MemoryEstimator(spec, block_size=config.block_size, dtype=dtype, max_model_len=max_model_len,
                                max_step_tokens=max_step_tokens, vocab_size=vocab_size, hidden_size=hidden_size,
                                safety_factor=config.generation_memory_safety_factor)
    blocks = dict(zip(spec.attention_groups, num_blocks))
    pools = tuple(group.bytes_per_slot(dtype) * config.max_num_seqs if g not in blocks
                  else group.bytes_per_block(config.block_size, dtype) * blocks[g]
                  for g, group in enumerate(spec.groups))
    policy = MemoryPolicy(config.min_free_memory_mib, config.reserve_memory_mib, config.max_estimated_usage_ratio,
                          config.generation_memory_safety_factor)
    cap = None if config.max_device_memory_gib is None else int(config.max_device_memory_gib * (1 << 30))
    step = estimator.step_activation_bytes(config.max_prefill_tokens + config.max_num_seqs, rows=config.max_num_seqs)
    return MemoryAdmission(policy, estimator, probe, weights_bytes=weights_bytes, pool_bytes=pools,
                           max_step_activation_bytes=step, total_bytes=cap)


class RequestIntake:
    """A request's checks before it queues, and the refusals' ``Retry-After``.

    Args:
        validator: the prompt and parameter checks.
        admission: the device memory's admission (its estimates held from :meth:`admit` to :meth:`finished`).
        metrics: counts the refusals (429s, memory 400s / 503s).
        failures: the engine's step failures (:attr:`StepFailures.degraded`: no request is taken while degraded).
        scheduler: its waiting and running queues (the queue limit, the Retry-After estimate).
        config: the engine's settings; ``max_waiting_requests`` (the waiting queue's limit, 0: none) is read at each
            check, so a change to it applies at once.
    """

    def __init__(self, validator: RequestValidator, admission: MemoryAdmission, metrics: EngineMetrics,
                 failures: StepFailures, scheduler: Scheduler, config: EngineConfig) -> None:
        self.validator = validator
        self.admission = admission
        self.metrics = metrics
        self.failures = failures
        self.scheduler = scheduler
        self.config = config
        self._finish_times: deque[float] = deque(maxlen=64)  # perf_counter seconds of the last requests' ends

    def validate(self, prompt_token_ids: list[int], params: SamplingParams,
                 multimodal: MultiModalInputs | None = None) -> None:
        """:meth:`~anna_core.engine.request_validation.RequestValidator.validate` (raises InvalidRequestError)."""
        self.validator.validate(prompt_token_ids, params, multimodal)

    def estimate(self, prompt_token_ids: list[int], params: SamplingParams) -> MemoryEstimate:
        """The device memory a request needs (:class:`~anna_core.engine.memory_admission.MemoryEstimate`)."""
        return self.admission.estimator.estimate(len(prompt_token_ids), params.max_tokens,
                                                 grammar=params.structured is not None, logprobs=params.logprobs is not None,
                                                 prompt_logprobs=params.prompt_logprobs is not None)

    def admit(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams, *,
              busy_check: bool = True) -> None:
        """Admit a request's memory estimate (held until :meth:`finished`); raises as
        :meth:`~anna_core.engine.llm_engine.LLMEngine.admit` says."""
        with self._admitting():
            self.admission.admit(request_id, self.estimate(prompt_token_ids, params), busy_check=busy_check)

    def admit_group(self, jobs: list[tuple[str, list[int], SamplingParams]]) -> None:
        """:meth:`admit` for the requests of one fan-out, all or none."""
        with self._admitting():
            self.admission.admit_group([(rid, self.estimate(ids, params)) for rid, ids, params in jobs])

    @contextlib.contextmanager
    def _admitting(self) -> Iterator[None]:
        """Around an admission: refuse while degraded; count memory refusals (a 503 gets its Retry-After)."""
        self.check_open()
        try:
            yield
        except MemoryUnavailableError as exc:
            self.metrics.on_refused_memory(503)
            exc.retry_after_s = self.retry_after_s(len(self.scheduler.running))
            raise
        except InvalidRequestError as exc:
            if exc.code == "insufficient_memory":
                self.metrics.on_refused_memory(400)
            raise

    def check_open(self) -> None:
        """Raises EngineDegradedError while the engine is degraded."""
        if self.failures.degraded is not None:
            raise EngineDegradedError(f"the engine is degraded and takes no requests: {self.failures.degraded}")

    def check_queue(self) -> None:
        """Raises QueueFullError (HTTP 429, with Retry-After) when ``max_waiting_requests`` wait already."""
        limit = self.config.max_waiting_requests
        if limit and len(self.scheduler.waiting) >= limit:
            self.metrics.on_rejected_429()
            raise QueueFullError(f"the engine's waiting queue is full ({limit} requests); retry later",
                                 retry_after_s=self.retry_after_s())

    def retry_after_s(self, num_waiting: int | None = None) -> int:
        """Seconds until ``num_waiting`` queued requests (default: those waiting now) are likely
        admitted, from the recent finish rate; 1 to 60."""
        waiting = len(self.scheduler.waiting) if num_waiting is None else num_waiting
        times = self._finish_times
        if len(times) < 2 or times[-1] <= times[0]:
            return 1
        rate = (len(times) - 1) / (times[-1] - times[0])  # requests finished per second
        return max(1, min(60, math.ceil(waiting / rate)))

    def finished(self, request_id: str, finished_time: float) -> None:
        """A request ended at ``finished_time`` (``time.perf_counter`` seconds): its memory estimate is released and
        the finish rate counts it."""
        self.admission.release(request_id)
        self._finish_times.append(finished_time)
