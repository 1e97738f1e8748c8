"""Scheduler and cache flags shared by ``anna serve`` and ``anna generate``.

    @click.command()
    @engine_options
    def serve(**kwargs):
        config = engine_config_from_options(**kwargs)

Every flag defaults to "not given" (``None``); ``--scheduler-profile`` sets the scheduler knobs
together and an explicitly given flag overrides its profile value
(:func:`anna_core.engine.profiles.resolve_profile`). Unset cache flags keep the
:class:`~anna_core.engine.config.EngineConfig` defaults.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import click

PROFILE_NAMES = ("none", "interactive", "throughput")

#: click parameter name -> EngineConfig field.
OPTION_FIELDS: dict[str, str] = {
    "scheduler_max_batch_size": "max_num_seqs",
    "scheduler_max_prefill_tokens": "max_prefill_tokens",
    "prefill_chunk_size": "prefill_chunk_size",
    "scheduler_max_decode_tokens": "max_decode_tokens",
    "scheduler_batch_wait_ms": "batch_wait_ms",
    "scheduler_max_queue_wait_ms": "max_queue_wait_ms",
    "scheduler_max_waiting_requests": "max_waiting_requests",
    "scheduler_dynamic_token_budget": "dynamic_token_budget",
    "request_timeout_s": "request_timeout_s",
    "async_scheduling": "async_scheduling",
    "max_encoder_tokens": "max_encoder_tokens",
    "encoder_cache_tokens": "encoder_cache_tokens",
    "block_size": "block_size",
    "num_kv_blocks": "num_blocks",
    "kv_cache_memory_gib": "kv_cache_memory_gib",
    "kv_cache_quantization": "kv_cache_quantization",
    "kv_cache_quant_bits": "kv_cache_quant_bits",
    "kv_cache_residual_len": "kv_cache_residual_len",
    "kv_cache_key_qjl": "kv_cache_key_qjl",
    "max_device_memory_gib": "max_device_memory_gib",
    "reserve_memory_mib": "reserve_memory_mib",
    "min_free_memory_mib": "min_free_memory_mib",
    "max_estimated_usage_ratio": "max_estimated_usage_ratio",
    "generation_memory_safety_factor": "generation_memory_safety_factor",
    "max_consecutive_step_failures": "max_consecutive_step_failures",
    "enable_prefix_caching": "enable_prefix_caching",
    "snapshot_interval": "snapshot_interval",
    "snapshot_memory_mib": "snapshot_memory_mib",
    "prompt_cache_size": "prompt_cache_size",
}
#: Every parameter name :func:`engine_options` adds (pop these before passing the rest on).
ENGINE_OPTION_NAMES = ("scheduler_profile", "disable_prompt_cache", *OPTION_FIELDS)

OFFLOAD_OPTION_NAMES = ("offload_mode", "resident_expert_layers", "resident_expert_layer_indices",
                        "cached_experts_per_layer", "expert_prefetch")
"""Every parameter name :func:`offload_options` adds."""

_NON_NEG_INT = click.IntRange(min=0)
_POS_INT = click.IntRange(min=1)
_NON_NEG = click.FloatRange(min=0.0)


def _finite_gib(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    if value is not None and not 0 < value < float("inf"):  # FloatRange lets nan and inf through
        raise click.BadParameter(f"must be a positive finite number of GiB, got {value}")
    return value


def _finite(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    if value is not None and not math.isfinite(value):  # FloatRange lets nan and inf through
        raise click.BadParameter(f"must be a finite number, got {value}")
    return value


max_device_memory_option = click.option(
    "--max-device-memory-gib", type=click.FloatRange(min=0.0, min_open=True), default=None, callback=_finite_gib,
    help="The most device memory the server may use: weights, KV cache, recurrent state and the expert cache of "
         "offloaded experts together (the KV cache gets what the rest leaves; --offload-mode auto offloads experts "
         "when the weights do not fit). Default: no cap (the device's free memory).")
"""``--max-device-memory-gib`` (``EngineConfig.max_device_memory_gib``): in :func:`engine_options` and, for the
commands without them (``anna generate``, ``anna bench``), on its own."""


def offload_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The expert offload flags of a MoE model (:class:`anna_core.engine.offload.OffloadConfig`; read them with
    :func:`offload_config_from_options`)."""
    decorators = [
        click.option("--offload-mode", type=click.Choice(("auto", "none", "experts")), default="auto",
                     show_default=True,
                     help="Routed experts of a MoE model in pinned host memory, copied to the device when chosen: "
                          "auto (when the weights do not fit --max-device-memory-gib or the free device memory), "
                          "none, experts (always, for the layers not kept resident)."),
        click.option("--resident-expert-layers", type=_NON_NEG_INT, default=None, metavar="N",
                     help="Keep the experts of the first N MoE layers on the device (same setting as "
                          "--resident-expert-layer-indices)."),
        click.option("--resident-expert-layer-indices", default=None, metavar="LIST",
                     help="MoE layers whose experts stay on the device, e.g. 0,1,8-11 (same setting as "
                          "--resident-expert-layers)."),
        click.option("--cached-experts-per-layer", type=_NON_NEG_INT, default=None, metavar="N",
                     help="Device LRU of experts per offloaded layer (0: every chosen expert is copied each step). "
                          "Default 0."),
        click.option("--expert-prefetch/--no-expert-prefetch", default=None,
                     help="While a layer computes, copy the next offloaded layer's likely experts into its cache "
                          "(needs --cached-experts-per-layer > 0). Default on."),
    ]
    for decorator in reversed(decorators):
        fn = decorator(fn)
    return fn


tensor_parallel_option = click.option(
    "--tensor-parallel-size", "tensor_parallel_size", type=click.IntRange(min=1), default=1, show_default=True,
    help="Split the model over this many GPUs of the host (cuda:0 .. N-1; one worker process per GPU past the "
         "first, NCCL): each holds its share of the heads, units and vocabulary. On the CPU the ranks use gloo.")
"""``--tensor-parallel-size`` (:mod:`anna_core.distributed`) of ``anna serve``, ``anna generate`` and ``anna bench``."""

vision_offload_option = click.option(
    "--offload-vision", "offload_vision", is_flag=True, default=False,
    help="Keep a vision-language model's vision tower on the CPU: images and video frames are encoded there and "
         "only their rows are copied to the device (saves the tower's device memory; encoding is slower).")
"""``--offload-vision`` (:func:`anna_core.loading.load_model`'s ``offload_vision``) of ``anna serve``,
``anna generate`` and ``anna bench``."""


def offload_config_from_options(**kwargs: Any) -> Any:
    """The :class:`~anna_core.engine.offload.OffloadConfig` of :func:`offload_options`' flags (other keys ignored).

    Raises:
        OffloadConfigError: both resident-layer flags, or a bad index list.
    """
    from anna_core.engine.offload import OffloadConfig

    return OffloadConfig.from_flags(**{k: kwargs.get(k) for k in OFFLOAD_OPTION_NAMES})


def engine_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Add the scheduler and cache flags to a click command (see the module doc)."""
    decorators = [
        click.option("--scheduler-profile", type=click.Choice(PROFILE_NAMES), default="none", show_default=True,
                     help="Set the scheduler flags together: interactive (latency), throughput (tokens/s), "
                          "none (each flag's own default). An explicit flag overrides its profile value."),
        click.option("--scheduler-max-batch-size", type=_POS_INT, default=None,
                     help="Sequences computed per step (running requests at once). Default 64."),
        click.option("--scheduler-max-prefill-tokens", type=_POS_INT, default=None,
                     help="Prompt tokens computed per step, all requests together. Default 8192 on a GPU, 2048 on the CPU."),
        click.option("--prefill-chunk-size", type=_NON_NEG_INT, default=None,
                     help="Prompt tokens of one request per step; 0 = auto from free KV memory. Default 0."),
        click.option("--scheduler-max-decode-tokens", type=_NON_NEG_INT, default=None,
                     help="Cached tokens one step's decodes may read (bounds attention cost); 0 = no limit."),
        click.option("--scheduler-batch-wait-ms", type=_NON_NEG, default=None,
                     help="How long a busy engine waits for more arrivals before admitting a prefill; "
                          "an idle engine never waits. Default 0."),
        click.option("--scheduler-max-queue-wait-ms", type=_NON_NEG, default=None,
                     help="Fairness: a request waiting longer is admitted before running requests continue "
                          "their prefills; 0 = off."),
        click.option("--scheduler-max-waiting-requests", type=_NON_NEG_INT, default=None,
                     help="Backpressure: with this many requests waiting, new ones get HTTP 429 with "
                          "Retry-After; 0 = unbounded."),
        click.option("--scheduler-dynamic-token-budget/--no-scheduler-dynamic-token-budget", default=None,
                     help="Scale the prefill budget from free KV blocks and the decodes' cached lengths."),
        click.option("--request-timeout-s", type=_NON_NEG, default=None,
                     help="End a request running longer than this with an error; 0 = no timeout."),
        click.option("--async-scheduling/--no-async-scheduling", default=None,
                     help="Launch the next decode step before reading back the one in flight (host work "
                          "overlaps device work; with decode graphs). Default on."),
        click.option("--max-encoder-tokens", type=_POS_INT, default=None,
                     help="Media placeholder tokens encoded per step (models that take images / audio); a "
                          "larger medium is refused. Default 16384."),
        click.option("--encoder-cache-tokens", type=_POS_INT, default=None,
                     help="Encoder-output rows kept while prefills still need them. Default 32768."),
        click.option("--block-size", type=_POS_INT, default=None, help="Tokens per paged KV block. Default 16."),
        click.option("--num-kv-blocks", type=_POS_INT, default=None,
                     help="KV blocks to allocate (overrides the memory sizing)."),
        click.option("--kv-cache-memory-gib", type=click.FloatRange(min=0.0, min_open=True), default=None,
                     callback=_finite_gib,
                     help="Memory for the KV cache (default: from free device memory; on CPU a quarter of "
                          "free RAM, at most 4 GiB)."),
        click.option("--kv-cache-quantization", type=click.Choice(["none", "turboquant", "auto"]), default=None,
                     help="Store the attention layers' keys and values TurboQuant-quantized (random rotation, "
                          "Lloyd-Max codes, a QJL sign bit for keys; arXiv 2504.19874) in the paged cache: about 4x "
                          "(4 bits) to 5x (3 bits) the tokens of bf16 in the same memory. auto: by model size "
                          "(none below 2B parameters, 4 bits below 24B, else 3). Default none."),
        click.option("--kv-cache-quant-bits", type=click.Choice(["2", "3", "4"]), default=None,
                     callback=lambda ctx, param, value: None if value is None else int(value),
                     help="Bits per key / value coordinate with --kv-cache-quantization turboquant (default 4) or "
                          "auto (default: its size tier's)."),
        click.option("--kv-cache-residual-len", type=_NON_NEG_INT, default=None,
                     help="With --kv-cache-quantization: each sequence's newest N positions also kept in the serving "
                          "dtype and attended exactly (their memory comes out of the KV budget). Default 0 with "
                          "turboquant, 128 with auto."),
        click.option("--kv-cache-key-qjl/--no-kv-cache-key-qjl", default=None,
                     help="Quantized keys carry the 1-bit QJL sign of their residual (bits - 1 code bits; unbiased "
                          "inner products, the paper's choice). Off: keys quantized as values at the full bits (lower "
                          "variance; about 0.4x the logit KL on small test models). Default on."),
        max_device_memory_option,
        click.option("--reserve-memory-mib", type=_NON_NEG, default=None, callback=_finite,
                     help="Memory left free when the KV cache is sized from free memory, and kept out of what memory "
                          "admission lets requests use. At least 0; default 0."),
        click.option("--min-free-memory-mib", type=_NON_NEG, default=None, callback=_finite,
                     help="Refuse a request (503) while the device's free memory less its estimated activations, "
                          "grammar and logprobs is under this. At least 0; default 0 (off)."),
        click.option("--max-estimated-usage-ratio", type=click.FloatRange(min=0.0, max=1.0, min_open=True),
                     default=None,
                     help="Share of the device's memory (or --max-device-memory-gib) the estimated usage (weights, "
                          "the KV and state requests hold per cache group, activations, grammars, logprobs) may "
                          "reach: a request over it is refused before it runs, 400 when it never fits, 503 when it "
                          "fits once running requests finish. In (0, 1]; default 1."),
        click.option("--generation-memory-safety-factor", type=click.FloatRange(min=1.0), default=None,
                     callback=_finite,
                     help="Factor on each request's estimated activations, grammar and logprobs memory. At least 1; "
                          "default 1.2."),
        click.option("--max-consecutive-step-failures", type=_POS_INT, default=None,
                     help="Failed engine steps in a row (e.g. device out-of-memory) after which the server is "
                          "degraded: /health answers 503 and new requests get 503. At least 1; default 3."),
        click.option("--enable-prefix-caching/--disable-prefix-caching", default=None,
                     help="Reuse KV blocks (and recurrent-state snapshots) of earlier prompts. Default on."),
        click.option("--snapshot-interval", type=_POS_INT, default=None,
                     help="Tokens between recurrent-state snapshots of models with recurrent layers (a multiple of the "
                          "block size). Default 256."),
        click.option("--snapshot-memory-mib", type=_NON_NEG, default=None, callback=_finite,
                     help="Memory for recurrent-state snapshots. Default 1024."),
        click.option("--prompt-cache-size", type=_NON_NEG_INT, default=None,
                     help="Keep the final state and logits of this many most recent exact prompts. Default 8."),
        click.option("--disable-prompt-cache", is_flag=True, default=False,
                     help="Turn the prompt cache off (same as --prompt-cache-size 0)."),
    ]
    for decorator in reversed(decorators):
        fn = decorator(fn)
    return fn


def engine_config_from_options(**kwargs: Any) -> Any:
    """The :class:`~anna_core.engine.config.EngineConfig` for the flags of :func:`engine_options`.

    Keys that are not engine flags are ignored, so a command may pass all its parameters; other
    ``EngineConfig`` fields (e.g. ``max_model_len``) may be given by their field names.

    Raises:
        AnnaError: unknown profile, or an inconsistent value (e.g. a snapshot interval that is not
            a multiple of the block size).
    """
    from anna_core.engine.config import EngineConfig

    explicit = {field: kwargs.get(name) for name, field in OPTION_FIELDS.items()}
    if kwargs.get("disable_prompt_cache"):
        explicit["prompt_cache_size"] = 0
    fields = _config_fields()
    for key, value in kwargs.items():
        if key in fields and value is not None and explicit.get(key) is None:
            explicit[key] = value
    return EngineConfig.from_profile(kwargs.get("scheduler_profile") or "none", **explicit)


def _config_fields() -> set[str]:
    import attrs
    from anna_core.engine.config import EngineConfig

    return {f.name for f in attrs.fields(EngineConfig)}
