"""Engine settings: scheduler knobs, KV block size, cache memory and prefix caching (pure Python).

Each knob has one meaning. Scheduler profiles (:mod:`anna_core.engine.profiles`) set the
scheduler knobs together; :meth:`EngineConfig.from_profile` applies a profile, then the knobs a
caller set explicitly.
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from anna_core.errors import AnnaError
from anna_core.kv_quant.settings import check_mode as check_kv_quant_mode


def _positive(instance: object, attribute: attrs.Attribute, value: int | None) -> None:
    if value is not None and value < 1:
        raise AnnaError(f"{attribute.name} must be at least 1, got {value}")


def non_negative(instance: object, attribute: attrs.Attribute, value: float | None) -> None:
    """An attrs validator: ``value`` is None or at least 0 (:class:`~anna_core.errors.AnnaError` otherwise; NaN is
    refused too)."""
    if value is not None and not value >= 0:
        raise AnnaError(f"{attribute.name} must not be negative, got {value}")


def non_negative_finite(instance: object, attribute: attrs.Attribute, value: float | None) -> None:
    """An attrs validator: ``value`` is None or a finite number of at least 0 (memory sizes: NaN and infinity would
    only fail later, in arithmetic)."""
    if value is not None and not 0 <= value < math.inf:
        raise AnnaError(f"{attribute.name} must be a finite number of at least 0, got {value}")


ACCELERATOR_PREFILL_TOKENS = 8192
"""The default prefill budget per step on an accelerator: a burst of arrivals is computed in a few large
steps (their decodes run as graphs beside them, :meth:`~anna_core.engine.model_runner.ModelRunner.split`);
BENCHMARKS.md (issue 22) has the serving figures it was chosen by."""
CPU_PREFILL_TOKENS = 2048
"""The default prefill budget per step on the CPU, where a step's time grows with its tokens."""


def default_max_prefill_tokens(device_type: str) -> int:
    """The prefill budget of an engine on a device of ``device_type`` (``"cpu"``, ``"cuda"``, ``"xpu"``, ...)
    whose config leaves ``max_prefill_tokens`` unset."""
    return CPU_PREFILL_TOKENS if device_type == "cpu" else ACCELERATOR_PREFILL_TOKENS


@attrs.define
class EngineConfig:
    """How the engine schedules requests and sizes its caches.

    Scheduler knobs (``0`` means "off" / "no limit" where noted):

    Attributes:
        max_num_seqs: max batch size: sequences computed per step (running requests at once);
            also the number of recurrent-state slots.
        max_prefill_tokens: prompt tokens computed per step, all requests together (prefill
            chunks, including the recompute of preempted requests). Decodes are not counted. ``None``:
            :func:`default_max_prefill_tokens` of the engine's device (8192 on an accelerator, 2048 on
            the CPU).
        prefill_chunk_size: prompt tokens of one request per step; ``0`` = auto from free KV
            memory: a chunk leaves one free block per running sequence (for its next decode), takes
            at least one block, and is otherwise bounded by the step's prefill budget.
        max_decode_tokens: cached tokens that one step's decodes may read together (a decode of a
            sequence with ``n`` tokens reads ``n``); bounds attention cost per step. The first
            decode of a step always runs; ``0`` = no limit.
        batch_wait_ms: a busy engine (one with running requests) waits up to this long after a
            request arrives for more arrivals before admitting a prefill, so that prefills are
            batched; an idle engine never waits. ``0`` = admit at once.
        max_queue_wait_ms: fairness: a request that has waited longer than this is admitted
            before running requests continue their prefills (which would grow the decode work);
            ``0`` = off.
        max_waiting_requests: backpressure: adding a request while this many wait raises
            :class:`~anna_core.errors.QueueFullError` (HTTP 429); ``0`` = unbounded.
        dynamic_token_budget: scale the prefill budget down as free KV blocks run short (full
            budget while at least half the cache is free) and as the decodes read more cached
            tokens (relative to ``max_decode_tokens``).
        request_timeout_s: a request running longer than this (from arrival) ends with finish
            reason ``"error"``; ``0`` = no timeout.
        async_scheduling: schedule and launch the next decode step before reading back the one
            in flight, so host work overlaps device work (where decode graphs are captured; see
            :mod:`anna_core.engine.llm_engine`). A request that stops on EOS or a stop string
            computes one discarded extra token.

        max_encoder_tokens: encoder-output rows (media placeholder tokens) encoded per step, all
            requests together; a chunk that would need more ends before the medium that does not fit.
            A medium larger than this (or than ``encoder_cache_tokens``) is refused.
        encoder_cache_tokens: encoder-output rows the runner keeps for requests whose prefill still
            needs them (:mod:`anna_core.engine.encoder_cache`).

    Cache knobs:

    Attributes:
        block_size: tokens per paged KV block.
        num_blocks: KV blocks to allocate in every attention cache group; overrides the memory budget
            when set.
        kv_cache_memory_gib: memory (GiB) for the KV blocks when ``num_blocks`` is unset;
            ``None`` sizes it from the device's free memory (see
            :func:`anna_core.engine.cache_allocator.default_kv_budget_bytes`) minus
            ``reserve_memory_mib`` and the snapshot budget.
        max_device_memory_gib: the most device memory (GiB) the server may use: weights, KV cache, recurrent
            state, snapshots and the expert cache and scratch of offloaded experts together
            (:mod:`anna_core.engine.offload`). The KV cache gets what the loaded model leaves of it, less a
            headroom for activations (:func:`anna_core.engine.cache_allocator.capped_kv_budget_bytes`; also the
            most ``kv_cache_memory_gib`` or ``num_blocks`` may take), and ``--offload-mode auto`` offloads
            experts when the weights do not fit it. ``None``: no cap (the device's free memory).
        reserve_memory_mib: memory (MiB) left free when sizing the KV cache from free memory, and kept out of the
            memory admission's capacity (below). At least 0; default 0.
        max_model_len: the longest sequence (prompt + output) served; ``None`` uses the
            checkpoint's limit. Always capped by what the KV cache can hold.
        enable_prefix_caching: reuse computed KV blocks (and recurrent-state snapshots) of
            earlier prompts with the same prefix.
        snapshot_interval: tokens between recurrent-state snapshots of models with a recurrent cache
            group (a multiple of ``block_size``). Models whose capabilities declare ``state_checkpoints``
            take them inside the prefill pass (:mod:`anna_core.layers.state_checkpoints`); for others,
            prefill chunks end at these boundaries so the state is copied after the step.
        snapshot_memory_mib: memory (MiB) for recurrent-state snapshots (their own budget; with in-pass
            snapshots one more entry, the captured prefills' scratch, is allocated beyond it).
        num_snapshots: snapshots to allocate; overrides ``snapshot_memory_mib`` when set.
        kv_cache_quantization: ``"none"`` (K/V in the serving dtype), ``"turboquant"`` (every attention group
            quantized: :mod:`anna_core.kv_quant`; the model must declare ``ModelCapabilities.quantized_kv``) or
            ``"auto"`` (by the model's size: :data:`anna_core.kv_quant.settings.AUTO_TIERS`).
        kv_cache_quant_bits: bits per K/V coordinate (2, 3 or 4) for ``turboquant`` (default 4) or ``auto`` (default:
            the tier's).
        kv_cache_residual_len: each sequence's newest positions also kept in the serving dtype and read instead of
            their quantized rows (:mod:`anna_core.kv_quant.residual`; their memory comes out of the KV budget):
            ``turboquant`` default 0, ``auto`` its tier's.
        kv_cache_key_qjl: quantized keys carry the QJL sign of their residual (``bits - 1`` code bits; unbiased inner
            products, the paper's ``TurboQuant_prod``); False: keys quantized as values at ``bits`` code bits.
        prompt_cache_size: keep the final state, tail KV block and last logits (and TurboQuant residual rings) of
            this many most recent exact prompts; an exact repeat then samples its first token without computing;
            ``0`` disables the prompt cache.

    Memory admission (:mod:`anna_core.engine.memory_admission`: a request that cannot fit is refused before it
    runs, HTTP 400 when it never can, 503 when it can once running requests finish):

    Attributes:
        min_free_memory_mib: refuse (503) a request while the device's free memory less the request's estimated
            generation memory (activations, grammar, logprobs) is under this. At least 0; ``0`` (default) = off.
        max_estimated_usage_ratio: the share of the device's memory (``max_device_memory_gib`` when that is
            smaller) that the estimated usage -- weights, the KV and state the admitted requests hold per cache
            group, their activations, grammars and logprobs -- may reach, less ``reserve_memory_mib``. In (0, 1];
            default 1.
        generation_memory_safety_factor: the factor on each request's estimated generation memory (allocator
            fragmentation, kernel workspaces). At least 1, finite; default 1.2.
        max_consecutive_step_failures: failed steps in a row after which the engine is degraded (fails what it
            holds, refuses new requests, ``/health`` 503; :mod:`anna_core.engine.faults`). At least 1; default 3.

    Raises:
        AnnaError: a limit is out of range.
    """

    max_num_seqs: int = attrs.field(default=64, validator=_positive)
    max_prefill_tokens: int | None = attrs.field(default=None, validator=_positive)
    prefill_chunk_size: int = attrs.field(default=0, validator=non_negative)
    max_decode_tokens: int = attrs.field(default=0, validator=non_negative)
    batch_wait_ms: float = attrs.field(default=0.0, validator=non_negative)
    max_queue_wait_ms: float = attrs.field(default=0.0, validator=non_negative)
    max_waiting_requests: int = attrs.field(default=0, validator=non_negative)
    dynamic_token_budget: bool = False
    request_timeout_s: float = attrs.field(default=0.0, validator=non_negative)
    async_scheduling: bool = True
    max_encoder_tokens: int = attrs.field(default=16384, validator=_positive)
    encoder_cache_tokens: int = attrs.field(default=32768, validator=_positive)
    block_size: int = attrs.field(default=16, validator=_positive)
    num_blocks: int | None = attrs.field(default=None, validator=_positive)
    kv_cache_memory_gib: float | None = None
    max_device_memory_gib: float | None = None
    reserve_memory_mib: float = attrs.field(default=0.0, validator=non_negative_finite)
    min_free_memory_mib: float = attrs.field(default=0.0, validator=non_negative_finite)
    max_estimated_usage_ratio: float = 1.0
    generation_memory_safety_factor: float = 1.2
    max_consecutive_step_failures: int = attrs.field(default=3, validator=_positive)
    max_model_len: int | None = attrs.field(default=None, validator=_positive)
    enable_prefix_caching: bool = True
    snapshot_interval: int = attrs.field(default=256, validator=_positive)
    snapshot_memory_mib: float = attrs.field(default=1024.0, validator=non_negative_finite)
    num_snapshots: int | None = attrs.field(default=None, validator=non_negative)
    prompt_cache_size: int = attrs.field(default=8, validator=non_negative)
    kv_cache_quantization: str = "none"
    kv_cache_quant_bits: int | None = None
    kv_cache_residual_len: int | None = None
    kv_cache_key_qjl: bool = True

    def __attrs_post_init__(self) -> None:
        check_kv_quant_mode(self.kv_cache_quantization, self.kv_cache_quant_bits, self.kv_cache_residual_len)
        if self.kv_cache_memory_gib is not None and not 0 < self.kv_cache_memory_gib < math.inf:
            raise AnnaError(f"kv_cache_memory_gib must be a positive finite number, got {self.kv_cache_memory_gib}")
        if self.max_device_memory_gib is not None and not 0 < self.max_device_memory_gib < float("inf"):
            raise AnnaError(f"max_device_memory_gib must be a positive finite number, got {self.max_device_memory_gib}")
        if not 0 < self.max_estimated_usage_ratio <= 1:
            raise AnnaError(f"max_estimated_usage_ratio must be in (0, 1], got {self.max_estimated_usage_ratio}")
        if not 1 <= self.generation_memory_safety_factor < float("inf"):
            raise AnnaError("generation_memory_safety_factor must be a finite number of at least 1, got "
                            f"{self.generation_memory_safety_factor}")
        if self.snapshot_interval % self.block_size:
            raise AnnaError(f"snapshot_interval ({self.snapshot_interval}) must be a multiple of block_size "
                            f"({self.block_size})")

    @classmethod
    def from_profile(cls, profile: str = "none", **explicit: Any) -> EngineConfig:
        """A config from a scheduler profile, every explicitly given (non-``None``) field winning.

        Raises:
            AnnaError: unknown profile or field, or a value out of range.
        """
        from anna_core.engine.profiles import resolve_profile

        names = {f.name for f in attrs.fields(cls)}
        unknown = sorted(set(explicit) - names)
        if unknown:
            raise AnnaError(f"unknown engine settings: {', '.join(unknown)}")
        return cls(**resolve_profile(profile, explicit))
