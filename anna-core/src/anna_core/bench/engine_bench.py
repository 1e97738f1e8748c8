"""``anna bench``: prefill and decode speed of the real engine, in process, with token-id prompts.

One timed *run* adds ``batch_size`` requests of ``input_len`` random token ids (a fresh draw each
run, so no prefix cache can help), greedy with EOS ignored, and steps the engine until every
request has ``output_len`` tokens. Per run: TTFT is the time from adding the requests to the end of
the step that gave the last of them its first token (prefill tokens/s = ``batch_size * input_len /
TTFT``); every later step that delivers tokens is one inter-token latency (ITL) for every stream
(with asynchronous scheduling a step may only launch work and deliver nothing; it adds no ITL of
its own, its time falls into the next one), so decode tokens/s per stream is ``1 / mean ITL`` and in total ``batch_size`` times that. Medians over the runs are
reported; ITL percentiles pool the decode steps of all runs. The roofline is the bytes one decode
step must move (:mod:`anna_core.bench.roofline`, at the mean context of the decode phase) over the
copy bandwidth measured in the same process.

With an image (``--image PATH`` / ``--image-size WxH``, :mod:`anna_core.bench.image_prompts`) every request is a
chat turn with one image instead of random token ids: ``input_len`` becomes that prompt's length (image
placeholders included), TTFT includes encoding the image, and the eager-loop check (text only) is left out. With
a video (``--video-frames N [--video-size WxH]``, :mod:`anna_core.bench.video_prompts`) the same with one random
video per request.

This module runs the benchmark and assembles its report; the settings are :mod:`anna_core.bench.bench_settings`,
the engine :mod:`anna_core.bench.bench_engine`, one timed run :mod:`anna_core.bench.timed_runs` and the timeline
and profile :mod:`anna_core.bench.decode_diagnostics` (their names are re-exported here).
"""

from __future__ import annotations

import logging
import statistics
from typing import Any

import attrs
import torch

from anna_core.bench.bench_engine import build_engine, build_group_engine, engine_config
from anna_core.bench.bench_settings import BenchSettings
from anna_core.bench.decode_diagnostics import (
    SERVED_TIMELINE_STEPS,
    decode_timeline,
    profile_decode,
    served_decode_timeline,
)
from anna_core.bench.roofline import copy_bandwidth, decode_step_bytes, wall_clock
from anna_core.bench.timed_runs import (
    SERVED_VS_EAGER_TOKENS,
    percentile,
    random_prompts,
    served_vs_eager,
    timed_run,
    tokens_sha256,
)
from anna_core.device import accelerator
from anna_core.errors import AnnaError
from anna_core.kernels.registry import chosen_kernels

__all__ = [
    "SERVED_TIMELINE_STEPS", "SERVED_VS_EAGER_TOKENS", "BenchSettings", "build_engine", "build_group_engine",
    "device_name", "engine_config", "percentile", "profile_decode", "random_prompts", "run_bench",
    "served_decode_timeline", "served_vs_eager", "timed_run", "tokens_sha256",
]

log = logging.getLogger("anna.bench")


def run_bench(s: BenchSettings, loaded: Any = None) -> dict[str, Any]:
    """Load (unless ``loaded`` is given), set up, warm up and time the engine; returns the report dict
    (keys documented in :func:`anna_core.bench.report.format_report`)."""
    from anna_core.loading import load_model

    bandwidth = None
    if loaded is None and s.tensor_parallel_size > 1:
        return _run_group_bench(s)
    if loaded is None:
        from anna_core.device import resolve_device

        accel = accelerator(resolve_device(s.device))
        bandwidth = copy_bandwidth(accel)  # on the empty device: its buffers add nothing to the model's peak
        accel.reset_peak_memory()
        t = wall_clock()
        loaded = load_model(s.model_dir, device=s.device, dtype=s.dtype, load_format=s.load_format,
                            disable_kernels=s.disable_kernels, weight_quant=s.weight_quant, offload=s.offload,
                            max_device_memory_gib=s.max_device_memory_gib, offload_vision=s.offload_vision,
                            family_options=None if s.lm_head_quant == "none" else {"lm_head_quant": s.lm_head_quant},
                            expert_quant=s.expert_quant)
        load_s = wall_clock() - t
    else:
        load_s = 0.0
    if s.compare_hf and loaded.expert_store is not None:  # HF's model would need the experts as parameters
        raise AnnaError("--compare-hf needs every expert on the device: the model's experts are offloaded "
                        "(use --offload-mode none, or leave --compare-hf out)")
    media_tokens = frame_groups = None
    medium = s.image if s.image is not None else s.video
    if medium is not None:  # the engine is sized to the media prompt's real length
        [probe], [mm] = s.media_requests(loaded, 1, s.seed * 1000 + 998)
        s = attrs.evolve(s, input_len=len(probe))
        media_tokens = sum(m.length for m in mm.items)
        frame_groups = len(mm.items)
    accel = accelerator(loaded.device)
    t = wall_clock()
    engine = build_engine(loaded, s)
    setup_s = wall_clock() - t
    return _measure(s, loaded, engine, load_s, setup_s, bandwidth, medium, media_tokens, frame_groups)


def _run_group_bench(s: BenchSettings) -> dict[str, Any]:
    """:func:`run_bench` over a tensor-parallel group: every rank loads its shard and builds its engine
    (``load_s`` covers both; ``setup_s`` is 0), rank 0 drives the runs; the workers are stopped at the end."""
    from anna_core.device import resolve_device
    from anna_core.distributed.launch import close_engine, load_engine

    accel = accelerator(resolve_device(s.device))
    bandwidth = copy_bandwidth(accel)
    accel.reset_peak_memory()
    t = wall_clock()
    load_kwargs = dict(device=s.device, dtype=s.dtype, load_format=s.load_format, disable_kernels=s.disable_kernels,
                       weight_quant=s.weight_quant, offload=s.offload, max_device_memory_gib=s.max_device_memory_gib,
                       family_options=None if s.lm_head_quant == "none" else {"lm_head_quant": s.lm_head_quant})
    loaded, engine, workers = load_engine(s.model_dir, load_kwargs, "anna_core.bench.bench_engine:build_group_engine",
                                          None, None, tensor_parallel_size=s.tensor_parallel_size,
                                          task_options={"settings": s})
    try:
        return _measure(s, loaded, engine, wall_clock() - t, 0.0, bandwidth, None)
    finally:
        close_engine(engine, workers)


def _measure(s: BenchSettings, loaded: Any, engine: Any, load_s: float, setup_s: float, bandwidth: float | None,
             medium: Any, media_tokens: int | None = None, frame_groups: int | None = None) -> dict[str, Any]:
    """The timed runs of :func:`run_bench` over a built engine, and the report (``medium``: the image or video
    spec of a media benchmark, with its tokens and frame groups per prompt)."""
    accel = accelerator(loaded.device)
    parallel = loaded.parallel is not None and loaded.parallel.is_parallel
    model = loaded.model
    vocab = model.vocab_size
    if bandwidth is None:
        bandwidth = copy_bandwidth(accel)

    runs = []
    for r in range(s.warmup + s.runs):
        if medium is None:
            prompts, media = random_prompts(vocab, s.batch_size, s.input_len, s.seed * 1000 + r), None
        else:
            prompts, media = s.media_requests(loaded, s.batch_size, s.seed * 1000 + r)
        res = timed_run(engine, prompts, s.output_len, f"run{r}", s.logprobs, media)
        if r >= s.warmup:
            runs.append(res)
            last_prompts = prompts
    ttft = statistics.median(x["ttft_s"] for x in runs)
    itl_all = [v for x in runs for v in x["itl_s"]]
    mean_itl = statistics.median(statistics.fmean(x["itl_s"]) for x in runs)
    context = s.input_len + s.output_len / 2
    step = decode_step_bytes(model, engine.cache_spec, s.batch_size, context, loaded.dtype)  # as allocated
    roof_per_stream = bandwidth / step.total
    per_stream = 1.0 / mean_itl
    report: dict[str, Any] = {
        "model": str(s.model_dir), "device": str(loaded.device), "device_name": device_name(loaded.device),
        "dtype": str(loaded.dtype).replace("torch.", ""), "weight_quant": s.weight_quant,
        "lm_head_quant": s.lm_head_quant, "expert_quant": s.expert_quant, "batch_size": s.batch_size, "input_len": s.input_len,
        "output_len": s.output_len, "runs": s.runs, "warmup": s.warmup, "cuda_graph": s.cuda_graph,
        "compile_mode": s.compile_mode, "async_scheduling": s.async_scheduling, "logprobs": s.logprobs,
        "prefix_caching": engine.config.enable_prefix_caching, "snapshots_held": len(engine.scheduler.snapshots),
        "serve_defaults": s.serve_defaults, "split_steps": engine.runner.num_split_steps,
        "kv_cache_quantization": None if engine.kv_quant is None else f"turboquant-{engine.kv_quant.bits}",
        "disabled_kernels": list(s.disable_kernels), "kernels": chosen_kernels(loaded.model), "graphs_captured": engine.runner.graphs is not None,
        "graph_steps": engine.runner.num_graph_steps, "eager_steps": engine.runner.num_eager_steps,
        "prefill_graph_steps": engine.runner.num_prefill_graph_steps,
        "lm_head_path": engine.runner.head_report(),
        "load_s": load_s, "setup_s": setup_s,
        "ttft_ms": ttft * 1e3, "prefill_tokens_per_s": s.batch_size * s.input_len / ttft,
        "decode_tokens_per_s_per_stream": per_stream, "decode_tokens_per_s_total": per_stream * s.batch_size,
        "itl_ms_p50": percentile(itl_all, 0.5) * 1e3, "itl_ms_p99": percentile(itl_all, 0.99) * 1e3,
        "peak_memory_gib": (accel.peak_memory_bytes() or 0) / 2**30,
        "copy_bandwidth_gbps": bandwidth / 1e9,
        "step_bytes": {"weights": step.weights, "state": step.state, "kv": step.kv, "total": step.total},
        "tensor_parallel_size": s.tensor_parallel_size,
        "roofline_tokens_per_s_per_stream": roof_per_stream,
        "roofline_fraction": per_stream / roof_per_stream,
        "first_tokens": runs[-1]["tokens"][0][:8],
        "tokens_sha256": tokens_sha256(runs[-1]["tokens"]),
    }
    if medium is None:
        if not parallel:  # the eager check runs the model on this rank alone
            report["served_vs_eager_match_tokens"] = served_vs_eager(model, last_prompts, runs[-1]["tokens"])
    elif s.image is not None:
        report["image"] = {"image": s.image.describe(), "image_tokens": media_tokens,
                           "offload_vision": s.offload_vision}
    else:
        report["video"] = {"video": s.video.describe(), "video_tokens": media_tokens, "frame_groups": frame_groups,
                           "offload_vision": s.offload_vision}
    if engine.expert_store is not None:
        report["expert_cache"] = engine.expert_store.report()
    graphs = engine.runner.graphs
    if graphs is not None and graphs.bucket_for(s.batch_size) is not None and not parallel:
        # device time of one captured step alone: ITL minus this is host time the device waited for
        report["graph_replay_ms"] = graphs.time_replay(graphs.bucket_for(s.batch_size))
    if s.timeline:
        report.update(decode_timeline(engine, s, vocab))
    if s.profile:
        report["profile_ms_per_step"] = profile_decode(engine, vocab, s)
    if s.compare_hf:
        from anna_core.bench.hf_compare import compare_hf

        prompt = random_prompts(vocab, s.batch_size, s.input_len, s.seed * 1000 + 999)
        report["hf"] = compare_hf(loaded, engine, prompt, s.hf_output_len or s.output_len, report)
    return report


def device_name(device: torch.device) -> str:
    """The accelerator's marketing name, or ``"cpu"``."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    if dev.type == "xpu":
        return torch.xpu.get_device_name(dev)
    return "cpu"
