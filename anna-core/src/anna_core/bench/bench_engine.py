"""The engine a benchmark times: its :class:`~anna_core.engine.config.EngineConfig` and its set-up runner.

Sized so that a prompt is never cut into chunks for lack of KV blocks (a TTFT measures one prefill step), or
built as ``anna serve`` builds it (``--serve-defaults``).
"""

from __future__ import annotations

from typing import Any

import attrs

from anna_core.bench.bench_settings import BenchSettings
from anna_core.errors import AnnaError


def engine_config(batch: int, max_len: int, prefill_tokens: int, *, block_size: int = 16,
                  prefix_caching: bool = False, async_scheduling: bool = True,
                  max_device_memory_gib: float | None = None) -> Any:
    """An :class:`~anna_core.engine.config.EngineConfig` for a benchmark: ``batch`` sequences of at most
    ``max_len`` tokens, ``prefill_tokens`` per step, prefix caching off unless asked and the prompt
    cache off (each run draws new prompts anyway). The KV cache holds every sequence at full length
    twice over, so the scheduler never has to cut a prompt into chunks for lack of free blocks: a
    TTFT measures one prefill step."""
    from anna_core.engine.config import EngineConfig

    fields = attrs.fields_dict(EngineConfig)
    kw: dict[str, Any] = {"max_num_seqs": batch, "max_model_len": max_len, "block_size": block_size}
    kw["num_blocks"] = 2 * batch * -(-max_len // block_size) + 8
    for name in ("max_num_batched_tokens", "max_prefill_tokens"):
        if name in fields:
            kw[name] = prefill_tokens
    if "enable_prefix_caching" in fields:
        kw["enable_prefix_caching"] = prefix_caching
    if "prompt_cache_size" in fields:
        kw["prompt_cache_size"] = 0
    if "async_scheduling" in fields:
        kw["async_scheduling"] = async_scheduling
    if max_device_memory_gib is not None:
        kw["max_device_memory_gib"] = max_device_memory_gib
    return EngineConfig(**kw)


def build_engine(loaded: Any, s: BenchSettings) -> Any:
    """The engine of one benchmark, its runner set up (warm-up, graphs) as ``s`` says."""
    from anna_core.engine.llm_engine import LLMEngine
    from anna_core.engine.model_runner import RunnerConfig

    if s.serve_defaults:  # `anna serve` with no flags
        from anna_core.engine.config import EngineConfig

        cfg = EngineConfig(max_device_memory_gib=s.max_device_memory_gib)
        if s.batch_size > cfg.max_num_seqs:
            raise AnnaError(f"--serve-defaults runs at most {cfg.max_num_seqs} sequences at once (anna serve's "
                            f"--scheduler-max-batch-size default), got --batch-size {s.batch_size}")
    else:
        max_len = s.input_len + s.output_len + 1
        cfg = engine_config(s.batch_size, max_len, s.batch_size * s.input_len, async_scheduling=s.async_scheduling,
                            prefix_caching=s.prefix_caching, max_device_memory_gib=s.max_device_memory_gib)
    cfg = attrs.evolve(cfg, kv_cache_quantization=s.kv_cache_quantization, kv_cache_quant_bits=s.kv_cache_quant_bits)
    if loaded.parallel is not None and loaded.parallel.is_parallel:  # a tensor-parallel rank's shard
        from anna_core.distributed.engine import TensorParallelEngine

        engine = TensorParallelEngine.from_loaded(loaded, cfg)
    else:
        engine = LLMEngine.from_loaded(loaded, cfg)
    # --serve-defaults: the decode-graph buckets of anna serve's batch limit, not of the benchmark's batch
    engine.runner.setup(RunnerConfig(cuda_graph=s.cuda_graph, compile_mode=s.compile_mode,
                                     fused_topk_head="auto" if s.fused_topk_head else "off"),
                        max_model_len=engine.max_model_len,
                        max_num_seqs=cfg.max_num_seqs if s.serve_defaults else s.batch_size,
                        max_prefill_tokens=engine.longest_one_step_prompt())
    return engine


def build_group_engine(loaded: Any, config: Any, runner: Any, *, settings: BenchSettings) -> Any:
    """:func:`build_engine` as a task builder (``build(loaded, config, runner, **options)``) for every rank of a
    tensor-parallel benchmark (:func:`anna_core.distributed.launch.load_engine`; ``config`` / ``runner`` unused:
    ``settings`` says it all)."""
    return build_engine(loaded, settings)
