"""Memory admission: estimate what a request needs and refuse it before it runs when it cannot fit.

One estimator (:class:`MemoryEstimator`) turns a request into a :class:`MemoryEstimate`: the bytes it holds in
each cache group (KV blocks of an attention group for its prompt and ``max_tokens``, one state slot of the
recurrent group), the activations of its largest step (a prefill chunk), its grammar bitmask and its logprobs
rows. A :class:`MemoryPolicy`, built from four settings (``EngineConfig.min_free_memory_mib``,
``reserve_memory_mib``, ``max_estimated_usage_ratio``, ``generation_memory_safety_factor``), compares it with the
device: the *capacity* is ``total × max_estimated_usage_ratio − reserve_memory_mib`` (total: the device's memory,
or ``max_device_memory_gib`` when that is smaller), and the estimated usage is the weights plus what the admitted
requests hold plus the new request. :class:`MemoryAdmission` keeps the admitted requests' estimates and decides:

- the weights and the request alone exceed the capacity: it can never run here, HTTP 400
  (:class:`~anna_core.errors.InvalidRequestError`, code ``insufficient_memory``);
- with the requests already admitted it exceeds the capacity, or the device's free memory less the request's
  generation memory (activations, grammar, logprobs) would fall under ``min_free_memory_mib``: it fits later,
  HTTP 503 (:class:`~anna_core.errors.MemoryUnavailableError`, with ``Retry-After``).

The KV and state pools are allocated when the engine starts, so the admitted requests' KV term of a group is
capped at its pool (the scheduler queues and preempts within it), and their activations at one full step's
(``max_prefill_tokens`` rows): at the default ratio of 1 a correctly sized engine never refuses for memory. The
device's figures come from a :class:`MemoryProbe` (:class:`DeviceMemoryProbe`: the torch allocator's and the
driver's counts on CUDA, the host's on the CPU; tests pass a :class:`StaticMemoryProbe`).
"""

from __future__ import annotations

import threading
from typing import Protocol

import attrs
import torch

from anna_core.cache_spec import CacheSpec, RecurrentStateSpec
from anna_core.engine.prompt_logprobs import ROWS_PER_HEAD_CALL
from anna_core.errors import AnnaError, InvalidRequestError, MemoryUnavailableError

_MIB = 1 << 20

ACTIVATION_WIDTHS = 16
"""Activation bytes of one token in a forward pass, in units of ``hidden_size × dtype bytes``: the residual
stream, norms, the attention's q/k/v/o and the MLP's gate and up projections (about ``2 × 3`` hidden widths for
a ``3×`` intermediate size) alive at once, rounded up."""


@attrs.frozen
class MemorySnapshot:
    """The device's memory now (bytes; None where the device does not say)."""

    total_bytes: int | None
    free_bytes: int | None


class MemoryProbe(Protocol):
    """Reads the device's memory (``snapshot`` may be called from any thread)."""

    def snapshot(self) -> MemorySnapshot: ...


class DeviceMemoryProbe:
    """:func:`anna_core.device.memory_stats` of ``device``: on CUDA the driver's free and total memory
    (``mem_get_info``) plus what torch's caching allocator has reserved but not allocated (free to torch, not to
    the driver); on the CPU the host's physical and available pages."""

    def __init__(self, device: torch.device):
        self.device = torch.device(device)

    def snapshot(self) -> MemorySnapshot:
        from anna_core.device import memory_stats

        stats = memory_stats(self.device)
        free = stats.get("free_bytes")
        if free is not None and "reserved_bytes" in stats and "allocated_bytes" in stats:
            free += max(0, stats["reserved_bytes"] - stats["allocated_bytes"])
        return MemorySnapshot(stats.get("total_bytes"), free)


@attrs.define
class StaticMemoryProbe:
    """Fixed figures (tests set ``free_bytes`` to fake a device running short)."""

    total_bytes: int | None
    free_bytes: int | None

    def snapshot(self) -> MemorySnapshot:
        return MemorySnapshot(self.total_bytes, self.free_bytes)


@attrs.frozen
class MemoryEstimate:
    """What one request needs on the device (bytes).

    Attributes:
        cache_bytes: per cache group (``CacheSpec.groups`` order): the KV blocks of an attention group for the
            request's whole sequence (prompt + ``max_tokens``, at most ``max_model_len``; a sliding-window group
            its window), one state slot of the recurrent group.
        activation_bytes: the activations of its largest step (a prefill chunk) and its logits rows.
        grammar_bytes: its grammar's token bitmask row (0 without a grammar).
        logprobs_bytes: the float32 log-softmax row its logprobs read (0 without logprobs).
        safety_factor: the factor the generation memory (activations, grammar, logprobs) is multiplied by in
            :attr:`total_bytes` (``generation_memory_safety_factor``).
    """

    cache_bytes: tuple[int, ...]
    activation_bytes: int = 0
    grammar_bytes: int = 0
    logprobs_bytes: int = 0
    safety_factor: float = 1.0

    @property
    def generation_bytes(self) -> int:
        """Activations, grammar and logprobs, times the safety factor: the memory allocated while it runs."""
        return int((self.activation_bytes + self.grammar_bytes + self.logprobs_bytes) * self.safety_factor)

    @property
    def total_bytes(self) -> int:
        return sum(self.cache_bytes) + self.generation_bytes


class MemoryEstimator:
    """Estimates requests of one engine (see :class:`MemoryEstimate`).

    Args:
        spec: the model's cache groups.
        block_size / dtype: the KV blocks' size and the caches' dtype.
        max_model_len: the longest sequence served.
        max_step_tokens: prompt tokens of one request in one step (the prefill budget, or the chunk size).
        vocab_size: the logits width.
        hidden_size: the model's hidden width (0 when unknown: activations are then its logits only).
        safety_factor: ``generation_memory_safety_factor``.
    """

    def __init__(self, spec: CacheSpec, *, block_size: int, dtype: torch.dtype, max_model_len: int,
                 max_step_tokens: int, vocab_size: int, hidden_size: int = 0, safety_factor: float = 1.0):
        self.spec = spec
        self.block_size = block_size
        self.dtype = dtype
        self.max_model_len = max_model_len
        self.max_step_tokens = max_step_tokens
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.safety_factor = safety_factor
        self._elem = torch.empty((), dtype=dtype).element_size()

    def estimate(self, num_prompt_tokens: int, max_tokens: int | None, *, grammar: bool = False,
                 logprobs: bool = False, prompt_logprobs: bool = False) -> MemoryEstimate:
        """The estimate of a request with this prompt length and ``max_tokens`` (None: up to ``max_model_len``);
        ``prompt_logprobs``: it records them (:mod:`~anna_core.engine.prompt_logprobs`: float32 logits and their
        log-softmax for :data:`~anna_core.engine.prompt_logprobs.ROWS_PER_HEAD_CALL` rows at a time, counted with
        its logprobs)."""
        want = self.max_model_len if max_tokens is None else num_prompt_tokens + max_tokens
        tokens = min(want, self.max_model_len)
        cache = []
        for group in self.spec.groups:
            if isinstance(group, RecurrentStateSpec):
                cache.append(group.bytes_per_slot(self.dtype))
            else:
                cache.append(group.max_blocks_per_seq(tokens, self.block_size) * group.bytes_per_block(self.block_size, self.dtype))
        return MemoryEstimate(
            cache_bytes=tuple(cache),
            activation_bytes=self.step_activation_bytes(min(num_prompt_tokens, self.max_step_tokens), rows=1),
            grammar_bytes=-(-self.vocab_size // 32) * 4 if grammar else 0,
            logprobs_bytes=(self.vocab_size * 4 if logprobs else 0)
            + (ROWS_PER_HEAD_CALL * self.vocab_size * 4 * 2 if prompt_logprobs else 0),
            safety_factor=self.safety_factor)

    def step_activation_bytes(self, num_tokens: int, rows: int) -> int:
        """Activations of a forward pass over ``num_tokens`` tokens that samples ``rows`` rows (float32 logits and
        the sampler's probabilities)."""
        return num_tokens * self.hidden_size * self._elem * ACTIVATION_WIDTHS + rows * self.vocab_size * 4 * 2


@attrs.frozen
class MemoryPolicy:
    """The admission settings (``EngineConfig``'s fields of the same names; see there for their bounds).

    Attributes:
        min_free_memory_mib: refuse (503) a request when the device's free memory less its generation memory
            would fall under this; 0: off.
        reserve_memory_mib: memory kept out of the capacity (also left free when the KV cache is sized).
        max_estimated_usage_ratio: the share of the device's memory the estimated usage may reach, in (0, 1].
        generation_memory_safety_factor: the factor (at least 1) on each request's generation memory.
    """

    min_free_memory_mib: float = 0.0
    reserve_memory_mib: float = 0.0
    max_estimated_usage_ratio: float = 1.0
    generation_memory_safety_factor: float = 1.0

    def capacity_bytes(self, total_bytes: int) -> int:
        """What the estimated usage may reach on a device of ``total_bytes``."""
        return int(total_bytes * self.max_estimated_usage_ratio) - int(self.reserve_memory_mib * _MIB)


class MemoryAdmission:
    """Admits requests by their :class:`MemoryEstimate` and keeps those of the admitted ones until they end.

    Thread-safe: the :class:`~anna_core.engine.async_engine.AsyncEngine` admits on the caller's thread, the
    engine thread releases.

    Args:
        policy: the settings.
        estimator: the engine's estimator.
        probe: the device's memory.
        weights_bytes: the model's bytes on the device (always in use).
        pool_bytes: per cache group, the bytes of its allocated pool (the admitted requests' term is capped there).
        max_step_activation_bytes: one full step's activations (the admitted requests' term is capped there).
        total_bytes: the device's memory to compare with (``max_device_memory_gib`` when smaller than the
            probe's total; None: the probe's).
    """

    def __init__(self, policy: MemoryPolicy, estimator: MemoryEstimator, probe: MemoryProbe, *, weights_bytes: int,
                 pool_bytes: tuple[int, ...], max_step_activation_bytes: int, total_bytes: int | None = None):
        self.policy = policy
        self.estimator = estimator
        self.probe = probe
        self.weights_bytes = weights_bytes
        self.pool_bytes = pool_bytes
        self.max_step_activation_bytes = max_step_activation_bytes
        totals = [x for x in (total_bytes, probe.snapshot().total_bytes) if x is not None]
        self.total_bytes = min(totals) if totals else None
        self._held: dict[str, MemoryEstimate] = {}
        self._lock = threading.Lock()
        self.refused_400 = 0
        self.refused_503 = 0

    @property
    def capacity_bytes(self) -> int | None:
        """What the estimated usage may reach (None: the device's total is unknown; only ``min_free`` applies)."""
        return None if self.total_bytes is None else self.policy.capacity_bytes(self.total_bytes)

    def held_bytes(self, extra: MemoryEstimate | None = None) -> int:
        """The admitted requests' estimated bytes (with ``extra``), each cache group capped at its pool and the
        activations at one full step. Call with the lock held or accept a racy figure."""
        return self._bytes(list(self._held.values()) + ([extra] if extra is not None else []))

    def _bytes(self, held: list[MemoryEstimate]) -> int:
        """The estimated bytes of ``held`` together, each cache group capped at its pool and the activations at
        one full step."""
        total = 0
        for g, pool in enumerate(self.pool_bytes):
            total += min(pool, sum(e.cache_bytes[g] for e in held))
        activations = sum(int(e.activation_bytes * e.safety_factor) for e in held)
        total += min(activations, int(self.max_step_activation_bytes * self.policy.generation_memory_safety_factor))
        total += sum(int((e.grammar_bytes + e.logprobs_bytes) * e.safety_factor) for e in held)
        return total

    def admit(self, request_id: str, estimate: MemoryEstimate, *, busy_check: bool = True) -> None:
        """Admit ``request_id`` (its estimate is held until :meth:`release`).

        Args:
            busy_check: also refuse when only the requests admitted before it leave no room (503); the synchronous
                :class:`~anna_core.llm.LLM` path passes False (its requests queue instead).

        Raises:
            InvalidRequestError: it does not fit an idle engine (HTTP 400, code ``insufficient_memory``), or
                ``request_id`` is held already.
            MemoryUnavailableError: it fits once admitted requests finish, or free memory is short (HTTP 503).
        """
        if request_id in self._held:
            raise InvalidRequestError(f"request id {request_id!r} is already in use")
        capacity = self.capacity_bytes
        alone = self.weights_bytes + estimate.total_bytes
        if capacity is not None and alone > capacity:
            self.refused_400 += 1
            raise InvalidRequestError(
                f"the request needs an estimated {_mib(estimate.total_bytes)} MiB of device memory (cache groups "
                f"{[_mib(b) for b in estimate.cache_bytes]} MiB, generation {_mib(estimate.generation_bytes)} MiB) "
                f"beside {_mib(self.weights_bytes)} MiB of weights; the server admits at most {_mib(capacity)} MiB "
                "(max_estimated_usage_ratio, reserve_memory_mib): lower max_tokens or the prompt",
                param="max_tokens", code="insufficient_memory")
        min_free = int(self.policy.min_free_memory_mib * _MIB)
        if busy_check and min_free:
            free = self.probe.snapshot().free_bytes
            if free is not None and free - estimate.generation_bytes < min_free:
                self.refused_503 += 1
                raise MemoryUnavailableError(
                    f"the device has {_mib(free)} MiB free; the request needs an estimated "
                    f"{_mib(estimate.generation_bytes)} MiB and min_free_memory_mib keeps {_mib(min_free)} MiB free; "
                    "retry later")
        with self._lock:
            if request_id in self._held:
                raise InvalidRequestError(f"request id {request_id!r} is already in use")
            if busy_check and capacity is not None and self.weights_bytes + self.held_bytes(estimate) > capacity:
                self.refused_503 += 1
                raise MemoryUnavailableError(
                    f"the running requests hold an estimated {_mib(self.held_bytes())} MiB of device memory; this "
                    f"request needs {_mib(estimate.total_bytes)} MiB more than the {_mib(capacity)} MiB admitted "
                    "(max_estimated_usage_ratio); retry later")
            self._held[request_id] = estimate

    def check_startup(self) -> None:
        """At engine start (the model and the pools allocated, nothing running): refuse a configuration under which
        the idle engine could admit no request at all, instead of coming up ready and answering 503 forever.

        Raises:
            AnnaError: the weights alone reach the capacity (``max_estimated_usage_ratio``, ``reserve_memory_mib``,
                ``max_device_memory_gib``), or the device's free memory is already under ``min_free_memory_mib``.
        """
        capacity = self.capacity_bytes
        if capacity is not None and self.weights_bytes >= capacity:
            raise AnnaError(
                f"the model's weights take {_mib(self.weights_bytes)} MiB of device memory; memory admission lets "
                f"requests use at most {_mib(capacity)} MiB in all (max_estimated_usage_ratio, reserve_memory_mib, "
                "max_device_memory_gib), so no request could ever run: raise max_estimated_usage_ratio or lower "
                "reserve_memory_mib")
        min_free = int(self.policy.min_free_memory_mib * _MIB)
        if min_free:
            free = self.probe.snapshot().free_bytes
            if free is not None and free < min_free:
                raise AnnaError(
                    f"min_free_memory_mib is {_mib(min_free)} MiB but the idle engine leaves only {_mib(free)} MiB of "
                    "device memory free once the weights and the KV cache are allocated, so every request would be "
                    "refused: lower min_free_memory_mib, or raise reserve_memory_mib (or lower kv_cache_memory_gib / "
                    "num_blocks) so the KV cache leaves that much free")

    def admit_group(self, items: list[tuple[str, MemoryEstimate]], *, busy_check: bool = True) -> None:
        """Admit the requests of one fan-out (``n`` choices, several prompts) together, all or none: the never-fits
        check (HTTP 400) is on the group's total, so a group that can never fit together is not refused 503 over
        and over; on any refusal none of them is held.

        Raises:
            InvalidRequestError: the group does not fit an idle engine (code ``insufficient_memory``), or an id is
                held already.
            MemoryUnavailableError: it fits once admitted requests finish, or free memory is short (HTTP 503).
        """
        if len(items) == 1:
            self.admit(*items[0], busy_check=busy_check)
            return
        ids = [rid for rid, _ in items]
        estimates = [e for _, e in items]
        if len(set(ids)) < len(ids) or any(rid in self._held for rid in ids):
            raise InvalidRequestError("a request id of the group is already in use")
        capacity = self.capacity_bytes
        alone = self.weights_bytes + max(max(e.total_bytes for e in estimates) if estimates else 0,
                                         self._bytes(estimates))
        if capacity is not None and alone > capacity:
            self.refused_400 += 1
            raise InvalidRequestError(
                f"the {len(items)} choices / prompts of the request need an estimated {_mib(alone - self.weights_bytes)} "
                f"MiB of device memory together beside {_mib(self.weights_bytes)} MiB of weights; the server admits "
                f"at most {_mib(capacity)} MiB (max_estimated_usage_ratio, reserve_memory_mib): lower n, max_tokens "
                "or the prompts", param="max_tokens", code="insufficient_memory")
        min_free = int(self.policy.min_free_memory_mib * _MIB)
        if busy_check and min_free:
            free = self.probe.snapshot().free_bytes
            need = sum(e.generation_bytes for e in estimates)
            if free is not None and free - need < min_free:
                self.refused_503 += 1
                raise MemoryUnavailableError(
                    f"the device has {_mib(free)} MiB free; the request's {len(items)} choices / prompts need an "
                    f"estimated {_mib(need)} MiB and min_free_memory_mib keeps {_mib(min_free)} MiB free; retry later")
        with self._lock:
            if any(rid in self._held for rid in ids):
                raise InvalidRequestError("a request id of the group is already in use")
            if busy_check and capacity is not None and \
                    self.weights_bytes + self._bytes(list(self._held.values()) + estimates) > capacity:
                self.refused_503 += 1
                raise MemoryUnavailableError(
                    f"the running requests hold an estimated {_mib(self.held_bytes())} MiB of device memory; the "
                    f"request's {len(items)} choices / prompts need more than the {_mib(capacity)} MiB admitted "
                    "(max_estimated_usage_ratio); retry later")
            self._held.update(items)

    def release(self, request_id: str) -> None:
        """``request_id`` ended (no-op if it was never admitted)."""
        with self._lock:
            self._held.pop(request_id, None)

    def report(self) -> dict[str, int | float | None]:
        """For ``/healthz`` (``engine.memory_admission``)."""
        with self._lock:
            held, n = self.held_bytes(), len(self._held)
        return {"capacity_bytes": self.capacity_bytes, "weights_bytes": self.weights_bytes, "held_bytes": held,
                "admitted": n, "refused_400": self.refused_400, "refused_503": self.refused_503,
                "max_estimated_usage_ratio": self.policy.max_estimated_usage_ratio}


def _mib(n: int) -> float:
    return round(n / _MIB, 1)
