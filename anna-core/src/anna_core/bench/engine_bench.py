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
"""

from __future__ import annotations

import logging
import statistics
from pathlib import Path
from typing import Any

import attrs
import torch

from anna_core.bench.roofline import copy_bandwidth, decode_step_bytes, wall_clock
from anna_core.device import accelerator
from anna_core.errors import AnnaError
from anna_core.kernels.registry import chosen_kernels

log = logging.getLogger("anna.bench")


@attrs.define
class BenchSettings:
    """What to benchmark (the ``anna bench`` flags).

    Raises:
        AnnaError: a non-positive length, batch or run count.
    """

    model_dir: Path
    device: str = "auto"
    dtype: str = "auto"
    load_format: str = "dummy"
    weight_quant: str = "auto"
    lm_head_quant: str = "none"
    """The LM head's quantization (a family load option: Qwen3.5's ``lm_head_quant``); ``"none"``: dense."""
    expert_quant: str = "none"
    """The MoE routed experts' quantization (``load_model(expert_quant=...)``); ``"none"``: dense."""
    batch_size: int = 1
    input_len: int = 512
    output_len: int = 256
    warmup: int = 1
    runs: int = 3
    cuda_graph: bool = True
    compile_mode: str = "none"
    fused_topk_head: bool = False
    """The fused top-k LM head where it applies (``RunnerConfig.fused_topk_head`` ``"auto"``); False (the
    default): ``"off"``."""
    async_scheduling: bool = True
    prefix_caching: bool = False
    serve_defaults: bool = False
    disable_kernels: tuple[str, ...] = ()
    profile: bool = False
    profile_steps: int = 8
    compare_hf: bool = False
    hf_output_len: int | None = None
    seed: int = 0
    logprobs: int | None = None
    timeline: bool = False
    offload: Any = None
    """An :class:`~anna_core.engine.offload.OffloadConfig` (None: the experts stay on the device)."""
    max_device_memory_gib: float | None = None
    image: Any = None
    """An :class:`~anna_core.bench.image_prompts.ImageSpec`: one image per request (None: token-id prompts)."""
    video: Any = None
    """A :class:`~anna_core.bench.video_prompts.VideoSpec`: one video per request (None: no video)."""
    offload_vision: bool = False
    tensor_parallel_size: int = 1
    """Devices the model is split over (``--tensor-parallel-size``; :mod:`anna_core.distributed`): the step bytes
    and roofline are then rank 0's (its shard's weights and caches, against one device's bandwidth)."""
    kv_cache_quantization: str = "none"
    """``--kv-cache-quantization`` of the engine (:mod:`anna_core.kv_quant`)."""
    kv_cache_quant_bits: int | None = None

    def __attrs_post_init__(self) -> None:
        for name in ("batch_size", "input_len", "output_len", "runs"):
            if getattr(self, name) < 1:
                raise AnnaError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.output_len < 2:
            raise AnnaError("--output-len must be at least 2 (one decode step after the first token)")
        if self.warmup < 0:
            raise AnnaError(f"--warmup must be non-negative, got {self.warmup}")
        if self.logprobs is not None and self.logprobs < 0:
            raise AnnaError(f"--logprobs must be non-negative, got {self.logprobs}")
        if self.serve_defaults and (self.prefix_caching or not self.async_scheduling):
            raise AnnaError("--serve-defaults builds the engine as `anna serve` does: drop --enable-prefix-caching "
                            "(on there) and --no-async-scheduling")
        if (self.image is not None or self.video is not None) and self.compare_hf:
            raise AnnaError("--compare-hf times text prompts only: leave it out with --image / --image-size / --video-*"
                            " (python -m anna_core.bench.vl_bench times HF with an image)")
        if self.image is not None and self.video is not None:
            raise AnnaError("one medium per request: --image / --image-size or --video-frames, not both")
        if self.tensor_parallel_size < 1:
            raise AnnaError(f"--tensor-parallel-size must be at least 1, got {self.tensor_parallel_size}")
        if self.tensor_parallel_size > 1 and (self.compare_hf or self.profile or self.timeline or self.image is not None
                                              or self.video is not None):
            raise AnnaError("--tensor-parallel-size above 1 times text prompts through the served path only: leave "
                            "out --compare-hf, --profile, --timeline and media (each runs the model on rank 0 alone)")

    def media_requests(self, loaded: Any, batch: int, seed: int) -> tuple[list[list[int]], list[Any]]:
        """``batch`` prompts with this benchmark's image or video each and their multimodal inputs."""
        if self.image is not None:
            from anna_core.bench.image_prompts import image_requests

            return image_requests(loaded, self.image, batch, seed)
        from anna_core.bench.video_prompts import video_requests

        return video_requests(loaded, self.video, batch, seed)


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


def _prompts(vocab: int, batch: int, length: int, seed: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, length), generator=gen).tolist()


def timed_run(engine: Any, prompts: list[list[int]], output_len: int, tag: str,
              logprobs: int | None = None, multimodal: list[Any] | None = None) -> dict[str, Any]:
    """Generate ``output_len`` greedy tokens for each prompt (with ``logprobs`` top log-probabilities
    per token when given: such steps take the captured logits graph and the eager sampler; with
    ``multimodal``, each prompt's :class:`~anna_core.multimodal.MultiModalInputs`); returns
    ``ttft_s``, ``itl_s`` (list) and the generated ids per request.

    Raises:
        AnnaError: a request failed, or ``logprobs`` was asked and a token came without them.
    """
    from anna_core.engine.sampling_params import SamplingParams

    params = SamplingParams(max_tokens=output_len, temperature=0.0, ignore_eos=True, logprobs=logprobs)
    t0 = wall_clock()
    for i, p in enumerate(prompts):
        engine.add_request(f"{tag}-{i}", p, params, multimodal=None if multimodal is None else multimodal[i])
    waiting = {f"{tag}-{i}" for i in range(len(prompts))}
    ttft = None
    itl: list[float] = []
    tokens: dict[str, list[int]] = {}
    last = t0
    while engine.has_unfinished():
        outs = engine.step()
        now = wall_clock()
        produced = False
        for o in outs:
            waiting.discard(o.request_id)
            if o.error:
                raise AnnaError(f"benchmark request {o.request_id} failed: {o.error}")
            produced = produced or bool(o.delta_token_ids)
            if logprobs is not None and o.delta_token_ids and len(o.logprobs) != len(o.delta_token_ids):
                raise AnnaError(f"benchmark request {o.request_id} got tokens without their logprobs")
            if o.finished:
                tokens[o.request_id] = list(o.token_ids)
        if not produced:
            continue  # e.g. a step launched without waiting (asynchronous scheduling): no token yet
        if ttft is not None:
            itl.append(now - last)  # time between consecutive token-bearing steps
        elif not waiting:
            ttft = now - t0
        last = now
    return {"ttft_s": ttft, "itl_s": itl, "tokens": [tokens[f"{tag}-{i}"] for i in range(len(prompts))]}


SERVED_VS_EAGER_TOKENS = 16
"""Leading tokens of every stream the benchmark compares with the eager greedy loop."""


def served_vs_eager(model: Any, prompts: list[list[int]], served: list[list[int]],
                    n: int = SERVED_VS_EAGER_TOKENS) -> int:
    """How many leading tokens (of the first ``n``) every stream served by the engine (graphs,
    asynchronous scheduling, the chosen kernels) shares with Anna's eager greedy loop over the same
    prompts (:func:`anna_core.testing.runner.simple_greedy_batch`): a check of the captured step.

    The eager loop runs with ``ANNA_TRITON_PDL=0`` (anna-xpu-kernels then launches its kernels without
    programmatic dependent launch, with the same arithmetic), so a kernel reading its predecessor's
    output too early shows up as a mismatch instead of on both sides.
    """
    import os
    from unittest import mock

    from anna_core.testing.runner import simple_greedy_batch

    n = min(n, min(len(t) for t in served))
    with mock.patch.dict(os.environ, {"ANNA_TRITON_PDL": "0"}):
        eager = simple_greedy_batch(model, prompts, n)
    return min(next((i for i, (a, b) in enumerate(zip(x, y)) if a != b), n) for x, y in zip(served, eager))


def tokens_sha256(streams: list[list[int]]) -> str:
    """SHA-256 of the generated token ids of every stream (in order, as ``"1,2,3;4,5"``), so that two runs (e.g.
    offloaded experts and fully resident) compare by one string."""
    import hashlib

    return hashlib.sha256(";".join(",".join(map(str, t)) for t in streams).encode()).hexdigest()


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    idx = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[idx]


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
    loaded, engine, workers = load_engine(s.model_dir, load_kwargs, "anna_core.bench.engine_bench:build_group_engine",
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
            prompts, media = _prompts(vocab, s.batch_size, s.input_len, s.seed * 1000 + r), None
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
        "itl_ms_p50": _pct(itl_all, 0.5) * 1e3, "itl_ms_p99": _pct(itl_all, 0.99) * 1e3,
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
        report.update(_timeline(engine, s, vocab))
    if s.profile:
        report["profile_ms_per_step"] = profile_decode(engine, vocab, s)
    if s.compare_hf:
        from anna_core.bench.hf_compare import compare_hf

        prompt = _prompts(vocab, s.batch_size, s.input_len, s.seed * 1000 + 999)
        report["hf"] = compare_hf(loaded, engine, prompt, s.hf_output_len or s.output_len, report)
    return report


def _timeline(engine: Any, s: BenchSettings, vocab: int) -> dict[str, Any]:
    """``{"timeline": rows, "timeline_source": "served" | "padded"}`` of the captured graph this run's
    decode steps replayed (the logits graph with ``--logprobs``): traced over steps the engine serves
    (:func:`~anna_core.bench.timeline.served_timeline`), or over back-to-back replays with padding
    rows when the served trace cannot be split (``timeline_served_error`` says why); or
    ``{"timeline_error": why}`` (no CUDA graph, or a trace that does not split into replays): the
    other measurements stand either way."""
    from anna_core.bench.timeline import graph_timeline

    graphs = engine.runner.graphs
    if graphs is None or engine.runner.device.type != "cuda" or graphs.bucket_for(s.batch_size) is None:
        return {"timeline_error": "needs a CUDA device with captured decode graphs"}
    mode = "logits" if s.logprobs is not None else "greedy"
    try:
        padded = graph_timeline(graphs, graphs.bucket_for(s.batch_size), engine.runner.accel, mode)
    except AnnaError as exc:
        return {"timeline_error": str(exc)}
    try:
        served = _served_timeline(engine, s, vocab, [r["name"] for r in padded])
    except AnnaError as exc:
        return {"timeline": padded, "timeline_source": "padded", "timeline_served_error": str(exc)}
    return {"timeline": served, "timeline_source": "served"}


SERVED_TIMELINE_STEPS = 12
"""Decode steps ``--timeline`` traces while the engine serves a batch."""


def _served_timeline(engine: Any, s: BenchSettings, vocab: int, names: list[str]) -> list[dict[str, Any]]:
    """Trace :data:`SERVED_TIMELINE_STEPS` served decode steps of a fresh batch and split out the captured
    step ``names``. The prompts have the decode phase's mean context (``input_len + output_len / 2``) as far
    as the benchmark's length limit allows; tracing starts once every request has its first token (the
    prefill may take several steps) and one more step is in flight, so every traced step decodes the
    whole batch.

    Raises:
        AnnaError: the prefill did not finish within its step bound, or a request failed.
    """
    from anna_core.bench.timeline import served_timeline
    from anna_core.engine.sampling_params import SamplingParams

    steps = SERVED_TIMELINE_STEPS
    total = s.input_len + s.output_len
    prompt_len = s.input_len + s.output_len // 2
    # the prefill budget is input_len tokens per request and step: longer prompts take several steps and
    # the requests may get their first token up to that many steps apart, so each asks for that many more
    for _ in range(2):
        prefill_steps = -(-prompt_len // s.input_len)
        max_tokens = min(steps + 8 + prefill_steps, total - 1)
        prompt_len = max(1, min(prompt_len, total - max_tokens))
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True, logprobs=s.logprobs)
    waiting = {f"timeline-{i}" for i in range(s.batch_size)}
    try:
        for i, p in enumerate(_prompts(vocab, s.batch_size, prompt_len, s.seed * 1000 + 777)):
            engine.add_request(f"timeline-{i}", p, params)
        bound = 8 + 2 * prefill_steps
        for _ in range(bound):
            for o in engine.step():
                if o.error:
                    raise AnnaError(f"timeline request {o.request_id} failed: {o.error}")
                if o.delta_token_ids:
                    waiting.discard(o.request_id)
            if not waiting:
                break
        if waiting:
            raise AnnaError(f"{len(waiting)} timeline requests had no token after {bound} steps")
        engine.step()  # the next decode step in flight (asynchronous scheduling)
        return served_timeline(engine.step, steps, names, engine.runner.accel.synchronize)
    finally:
        while engine.has_unfinished():
            engine.step()


def profile_decode(engine: Any, vocab: int, s: BenchSettings) -> dict[str, float]:
    """Per-component ms of ``s.profile_steps`` eager decode steps at this batch size (after a prefill)."""
    from anna_core.bench.profile import profile_steps
    from anna_core.engine.sampling_params import SamplingParams

    params = SamplingParams(max_tokens=s.profile_steps + 2, temperature=0.0, ignore_eos=True)
    for i, p in enumerate(_prompts(vocab, s.batch_size, s.input_len, 4242)):
        engine.add_request(f"prof-{i}", p, params)
    engine.step()  # prefill, not profiled

    def run() -> int:
        n = 0
        while engine.has_unfinished() and n < s.profile_steps:
            engine.step()
            n += 1
        return n

    try:
        return profile_steps(engine.runner, run)
    finally:
        while engine.has_unfinished():
            engine.step()


def device_name(device: torch.device) -> str:
    """The accelerator's marketing name, or ``"cpu"``."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    if dev.type == "xpu":
        return torch.xpu.get_device_name(dev)
    return "cpu"
