"""``anna bench``: in-process prefill / decode benchmark with token-id prompts (see
:mod:`anna_core.bench.engine_bench` for what is measured and how)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from anna_cli.engine_options import (
    max_device_memory_option,
    offload_config_from_options,
    offload_options,
    tensor_parallel_option,
    vision_offload_option,
)
from anna_cli.options import (
    DEVICES,
    DTYPES,
    LOAD_FORMATS,
    WEIGHT_QUANT_HELP,
    WEIGHT_QUANTS,
    exit_on_anna_errors,
    expert_quant_option,
    fused_topk_head_option,
    lm_head_quant_option,
)


@click.command("bench")
@click.option("--model-dir", type=click.Path(exists=True, path_type=Path), required=True,
              help="Model folder; with --load-format dummy a folder holding only config.json will do.")
@click.option("--device", type=click.Choice(DEVICES), default="auto", show_default=True)
@click.option("--dtype", type=click.Choice(DTYPES), default="auto", show_default=True)
@click.option("--load-format", type=click.Choice(LOAD_FORMATS), default="dummy", show_default=True)
@click.option("--weight-quant", type=click.Choice(WEIGHT_QUANTS), default="auto", show_default=True,
              help=WEIGHT_QUANT_HELP)
@lm_head_quant_option
@expert_quant_option
@click.option("--batch-size", type=int, default=1, show_default=True, help="Concurrent requests.")
@click.option("--input-len", type=int, default=512, show_default=True, help="Prompt tokens per request.")
@click.option("--output-len", type=int, default=256, show_default=True, help="Generated tokens per request.")
@click.option("--warmup", type=int, default=1, show_default=True, help="Untimed runs first.")
@click.option("--runs", type=int, default=3, show_default=True, help="Timed runs (medians reported).")
@click.option("--cuda-graph/--no-cuda-graph", default=True, show_default=True,
              help="Capture decode steps as device graphs (CUDA / XPU).")
@click.option("--compile-mode", type=click.Choice(["none", "default", "max-autotune"]), default="none",
              show_default=True, help="torch.compile the forward pass before capture.")
@fused_topk_head_option
@click.option("--async-scheduling/--no-async-scheduling", default=True, show_default=True,
              help="Launch the next decode step before reading back the current one.")
@click.option("--enable-prefix-caching/--disable-prefix-caching", "prefix_caching", default=False, show_default=True,
              help="Prefix caching as `anna serve` has it on (each run's prompts are new: no hits, but a model "
                   "with recurrent layers snapshots its recurrent state every snapshot interval).")
@click.option("--serve-defaults", is_flag=True,
              help="Build the engine as `anna serve` does with no flags (prefix caching and the prompt cache on, "
                   "64 sequences, the checkpoint's context, the device's prefill budget) instead of one sized to "
                   "the benchmark, so the figures are what a server gets.")
@click.option("--disable-kernel", "disable_kernels", multiple=True, metavar="OP:NAME|NAME",
              help="Never use this kernel implementation (e.g. linear:triton); repeatable.")
@click.option("--profile", is_flag=True, help="Also print device time per component of an eager decode step.")
@click.option("--compare-hf", is_flag=True,
              help="Also time HF transformers generate (with fla when importable) on the same weights.")
@click.option("--hf-output-len", type=int, default=None, help="Tokens HF generates (default: --output-len).")
@click.option("--logprobs", type=int, default=None,
              help="Ask for this many top log-probabilities per token (decode then replays the captured "
                   "logits graph and samples eagerly).")
@click.option("--timeline", is_flag=True,
              help="Also trace one captured decode step kernel by kernel (CUDA; see anna_core.bench.timeline).")
@click.option("--image", "image_path", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Each request is a chat turn with this image (a vision-language checkpoint): TTFT includes "
                   "encoding it; --input-len is then the rendered prompt's length.")
@click.option("--image-size", default=None, metavar="WxH",
              help="With --image: resize it to WxH; alone: a random WxH image per request (e.g. 1024x1024).")
@click.option("--video-frames", type=int, default=None, metavar="N",
              help="Each request is a chat turn with a random N-frame video (frames at 2 fps) on a vision-language "
                   "checkpoint that takes video; TTFT includes encoding it.")
@click.option("--video-size", default="640x480", show_default=True, metavar="WxH",
              help="With --video-frames: the frames' size.")
@click.option("--kv-cache-quantization", type=click.Choice(["none", "turboquant", "auto"]), default="none",
              show_default=True, help="The engine's KV cache: bf16 or TurboQuant (as anna serve's flag).")
@click.option("--kv-cache-quant-bits", type=click.Choice(["2", "3", "4"]), default=None,
              help="Bits per K/V coordinate with --kv-cache-quantization (default 4 / auto's tier).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
@max_device_memory_option
@offload_options
@vision_offload_option
@tensor_parallel_option
@exit_on_anna_errors
def bench(model_dir: Path, device: str, dtype: str, load_format: str, weight_quant: str, lm_head_quant: str,
          expert_quant: str,
          batch_size: int, input_len: int,
          output_len: int, warmup: int, runs: int, cuda_graph: bool, compile_mode: str, fused_topk_head: bool,
          async_scheduling: bool, prefix_caching: bool, serve_defaults: bool, disable_kernels: tuple[str, ...], profile: bool,
          compare_hf: bool, hf_output_len: int | None, logprobs: int | None, timeline: bool,
          image_path: Path | None, image_size: str | None, video_frames: int | None, video_size: str,
          kv_cache_quantization: str, kv_cache_quant_bits: str | None, as_json: bool, max_device_memory_gib: float | None,
          offload_vision: bool, tensor_parallel_size: int, **offload_flags: Any) -> None:
    """Measure prefill and decode speed, ITL, peak memory and the bandwidth roofline in process."""
    from anna_core.bench.engine_bench import BenchSettings, run_bench
    from anna_core.bench.image_prompts import ImageSpec, parse_image_size
    from anna_core.bench.report import format_report
    from anna_core.bench.video_prompts import VideoSpec

    settings = BenchSettings(model_dir=model_dir, device=device, dtype=dtype, load_format=load_format,
                             weight_quant=weight_quant, lm_head_quant=lm_head_quant, expert_quant=expert_quant,
                             batch_size=batch_size, input_len=input_len, output_len=output_len, warmup=warmup,
                             runs=runs, cuda_graph=cuda_graph, compile_mode=compile_mode, fused_topk_head=fused_topk_head,
                             async_scheduling=async_scheduling, prefix_caching=prefix_caching,
                             serve_defaults=serve_defaults, disable_kernels=disable_kernels, profile=profile,
                             compare_hf=compare_hf, hf_output_len=hf_output_len, logprobs=logprobs,
                             timeline=timeline, offload=offload_config_from_options(**offload_flags),
                             max_device_memory_gib=max_device_memory_gib, offload_vision=offload_vision,
                             tensor_parallel_size=tensor_parallel_size,
                             kv_cache_quantization=kv_cache_quantization,
                             kv_cache_quant_bits=None if kv_cache_quant_bits is None else int(kv_cache_quant_bits),
                             image=None if image_path is None and image_size is None else ImageSpec(
                                 image_path, None if image_size is None else parse_image_size(image_size)),
                             video=None if video_frames is None else VideoSpec(video_frames,
                                                                               parse_image_size(video_size, "--video-size")))
    report = run_bench(settings)
    click.echo(json.dumps(report, indent=1) if as_json else format_report(report))
