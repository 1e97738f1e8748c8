"""Issue 27 on a GPU: where the device time of a frame goes at 16 requests, by kernel.

At the 1.7B shape (random bf16 weights): the code predictor's frame (``FramePredictor``, sampled with the checkpoints'
``subtalker_*`` defaults) at ``--rows`` rows, and the codec decoder continuing ``--rows`` streams by a chunk of
``--chunk`` frames (as the vocoder decodes a served chunk, eagerly), each once under ``torch.profiler``: the device
microseconds summed by kernel name, the twelve largest, their launch counts, and the total. These are the two parts
that grow from one request to 16 (the step's predictor 2.0 -> 3.3 ms a frame, the vocoder 0.42 -> 1.65 ms, H100,
2026-12-07); the table says which kernels grow. Then the decoder's chunk timed (median of 10, eager) with cuDNN's
heuristics and with its algorithm search (``cudnn.benchmark``), and the chunk's convolutions by time with their
shapes: the convolutions' share is the vocoder's largest.

Run from the repository root with the Anna wheels installed (about 30 s; stdout)::

    timeout 120 python3 tools/gpu_experiments/tts_time_profile.py [--rows 16] [--chunk 8] [--layout time-major]

``--device cpu`` checks the script (no device times: the CPU profiler's operator times instead), and times the
decoder's chunk on the host (``--layout`` A/B of the decoder's layouts on the CPU).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
SHAPE = ROOT / "tests/audio/reference_configs/Qwen3-TTS-12Hz-1.7B-Base.json"
CODEC = ROOT / "tests/audio/reference_configs/Qwen3-TTS-Tokenizer-12Hz.json"


def table(name: str, fn, device: torch.device) -> None:
    """Run ``fn`` once under the profiler and print its device time by kernel (or CPU op time off CUDA)."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    with torch.inference_mode():
        for _ in range(3):  # compile, tune, allocate first
            fn()
        if cuda:
            torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
            fn()
            if cuda:
                torch.cuda.synchronize()
    total: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for e in prof.events():
        if cuda and e.device_type.name != "CUDA":
            continue
        if not cuda and e.cpu_parent is not None:  # top-level operators only
            continue
        us = e.time_range.elapsed_us() if cuda else e.cpu_time  # a kernel event: its own span
        total[e.name] += us
        count[e.name] += 1
    whole = sum(total.values())
    print(f"{name}: {sum(count.values())} {'kernels' if cuda else 'ops'}, {whole:.0f} us "
          f"({'device' if cuda else 'CPU'})", flush=True)
    for k, us in sorted(total.items(), key=lambda kv: -kv[1])[:12]:
        print(f"  {us:8.1f} us {100 * us / max(whole, 1e-9):5.1f}%  x{count[k]:<4d} {k[:110]}", flush=True)


def convolutions(fn, device: torch.device, top: int = 10) -> None:
    """Run ``fn`` once under the profiler (with shapes) and print its convolutions by device time (CPU time off
    CUDA): each ``conv1d`` / ``conv_transpose1d`` call's input and weight shapes and the time of the kernels it
    launched (which convolutions the slow cuDNN kernels serve)."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with torch.inference_mode():
        fn()
        with profile(activities=activities, record_shapes=True) as prof:
            fn()
            if cuda:
                torch.cuda.synchronize()
    calls = []
    for e in prof.events():
        if e.name in ("aten::conv1d", "aten::conv_transpose1d", "aten::conv2d", "aten::linear"):
            calls.append((e.device_time_total if cuda else e.cpu_time_total, e.name, e.input_shapes[:2]))
    print(f"convolutions and linear layers (the transformer's and ConvNeXt's too): {len(calls)}, "
          f"{sum(c[0] for c in calls):.0f} us", flush=True)
    for us, name, shapes in sorted(calls, key=lambda c: -c[0])[:top]:
        print(f"  {us:8.1f} us  {name[6:]:16s} input {shapes[0]} weight {shapes[1]}", flush=True)


def main() -> None:
    from anna_audio.qwen3_tts.code_predictor import CodePredictor
    from anna_audio.qwen3_tts.codec_decoder import CodecDecoder, phased_min_channels_for
    from anna_audio.qwen3_tts.config import parse_codec, parse_talker
    from anna_audio.qwen3_tts.frame_predictor import FramePredictor
    from anna_audio.qwen3_tts.sampling import CodeSampling
    from anna_audio.qwen3_tts.stream_state import StreamState
    from anna_audio.tts_bench import _median_ms
    from anna_core.device import accelerator
    from anna_core.kernels.registry import KernelRegistry, bind_ops
    from codec_weights import randomize_codebooks

    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--chunk", type=int, default=8)
    ap.add_argument("--layout", choices=("contiguous", "time-major"), default="contiguous",
                    help="the codec decoder's activations: [B, C, T]-contiguous or time-major (channels-last)")
    args = ap.parse_args()
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type != "cpu" else torch.float32
    torch.manual_seed(0)
    print(f"tts_time_profile on {torch.cuda.get_device_name(device) if device.type == 'cuda' else device}, "
          f"{args.rows} rows, chunks of {args.chunk} frames", flush=True)

    talker, config = parse_talker(json.loads(SHAPE.read_text())["talker_config"])
    width = talker.shape.hidden_size
    with torch.device(device):
        predictor = CodePredictor(config, width).to(dtype).eval().requires_grad_(False)
    ops = bind_ops(KernelRegistry.from_plugins(), device, dtype)
    frame = FramePredictor(predictor, ops, CodeSampling(True, 0.9, 50, 1.0))
    frame.reserve(args.rows + 1)
    h = torch.randn(args.rows, width, device=device, dtype=dtype)
    table(f"code predictor frame ({config.num_code_groups - 1} passes), sampled", lambda: frame(h, h), device)

    decoder = CodecDecoder(parse_codec(json.loads(CODEC.read_text())).decoder, ops,
                           time_major=args.layout == "time-major",
                           phased_min_channels=phased_min_channels_for(device)).eval()  # its snake_beta too
    randomize_codebooks(decoder)
    decoder = decoder.layout_weights().to(device, dtype)
    q = decoder.config.num_quantizers
    codes = torch.randint(0, 2048, (args.rows, args.chunk, q), dtype=torch.int64)
    states = [StreamState() for _ in range(args.rows)]
    with torch.inference_mode():
        decoder.decode_streams(states, codes)  # the streams' first chunks: the profiled ones continue them
    decode = lambda: decoder.decode_streams(states, codes)  # noqa: E731
    table(f"codec decoder, {args.rows} streams continued by {args.chunk} frames (eager)", decode, device)
    convolutions(decode, device)
    if device.type == "cuda":  # cuDNN's own algorithm search for these fixed shapes, against its heuristics
        accel = accelerator(device)
        for bench in (False, True):
            with torch.backends.cudnn.flags(enabled=True, benchmark=bench), torch.inference_mode():
                decode()  # (with cudnn.benchmark: its search)
                ms = _median_ms(accel, decode)
            print(f"codec decoder chunk, cudnn.benchmark={bench}: {ms:.3f} ms ({ms / args.chunk:.3f} ms a frame)",
                  flush=True)
    else:  # the chunk's wall time on the host (median of 5)
        times = []
        with torch.inference_mode():
            for _ in range(5):
                start = time.perf_counter()
                decode()
                times.append(time.perf_counter() - start)
        print(f"codec decoder chunk ({args.layout}, {device}): {1e3 * sorted(times)[2]:.1f} ms wall", flush=True)


if __name__ == "__main__":
    main()
