"""Issue 27 on a GPU: the code predictor's frame loop (``FramePredictor``, tts-cp-fuse branch: the norms fused into
the qkv / gate-up / head projections, a frame's Gumbel noise in one draw). Two parts:

1. codes: every tiny golden checkpoint (tests/audio/fixtures/qwen3_tts) in float32 on the device, greedy: the
   frame loop's codebooks ``1 .. G-1`` for all the golden frames against the reference's (line ``codes <kind>:
   <equal>/<frames> frames equal``; the CPU test requires all equal; on a GPU a rare near-tie may flip);
2. launches: the 1.7B shape's predictor (random weights, bf16) on the device, one eager frame under
   ``torch.profiler`` at batch 1 and 16, greedy and sampled (the checkpoints' ``subtalker_*`` defaults): the device
   kernels (and memsets / copies) a frame launches, per predictor step (``/ 15``), the five most frequent kernels,
   and the frame's time replaying a CUDA graph of it (median of 50).

Prints one line per measurement; exits 1 when a golden checkpoint's codes differ in more than 2% of its frames.
Run from the repo root with the Anna wheels installed (about 20-60 s; Triton compiles on a cold cache)::

    timeout 60 python3 tools/gpu_experiments/tts_cp_check.py | tee $OUT/tts_cp_check.log

``DEVICE=cpu`` runs part 1 on the CPU and part 2 without the profiler's device counts (checks the script only).
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # tests.audio's golden fixtures
DEVICE = torch.device(os.environ.get("DEVICE", "cuda"))
SHAPE = ROOT / "tests/audio/reference_configs/Qwen3-TTS-12Hz-1.7B-Base.json"


def golden_codes() -> bool:
    from anna_audio.qwen3_tts import load_code_predictor, load_config
    from anna_audio.qwen3_tts.frame_predictor import FramePredictor
    from anna_audio.qwen3_tts.generate import GREEDY
    from anna_core.kernels.registry import KernelRegistry, bind_ops
    from safetensors.torch import load_file

    from tests.audio.tts_golden import CHECKPOINTS, cases, golden

    ok = True
    for kind in ("base", "custom_voice", "voice_design"):
        tensors, _ = golden(kind)
        folder = CHECKPOINTS[kind]
        predictor = load_code_predictor(folder, load_config(folder), device=DEVICE)
        table = load_file(str(folder / "model.safetensors"))["talker.model.codec_embedding.weight"].float()
        fast = FramePredictor(predictor, bind_ops(KernelRegistry.from_plugins(), DEVICE, torch.float32), GREEDY)
        fast.reserve(8)
        equal = total = 0
        for case, row in cases(tensors):
            codes, hidden = tensors[f"{case}/codes/{row}"], tensors[f"{case}/talker_hidden/{row}"]
            with torch.inference_mode():
                predicted, _ = fast(hidden.to(DEVICE), table[codes[:, 0]].to(DEVICE))
            equal += int((predicted.cpu() == codes[:, 1:]).all(dim=1).sum())
            total += codes.shape[0]
        print(f"codes {kind}: {equal}/{total} frames equal", flush=True)
        ok &= equal >= 0.98 * total
    return ok


def launches() -> None:
    from anna_audio.qwen3_tts.code_predictor import CodePredictor
    from anna_audio.qwen3_tts.config import parse_talker
    from anna_audio.qwen3_tts.frame_predictor import FramePredictor
    from anna_audio.qwen3_tts.generate import GREEDY
    from anna_audio.qwen3_tts.sampling import CodeSampling
    from anna_core.kernels.registry import KernelRegistry, bind_ops
    from torch.profiler import ProfilerActivity, profile

    talker, config = parse_talker(json.loads(SHAPE.read_text())["talker_config"])
    width, dtype = talker.shape.hidden_size, torch.bfloat16
    torch.manual_seed(0)
    with torch.device(DEVICE):
        predictor = CodePredictor(config, width).to(dtype).eval().requires_grad_(False)
    ops = bind_ops(KernelRegistry.from_plugins(), DEVICE, dtype)
    steps = config.num_code_groups - 1
    for name, sampling in (("greedy", GREEDY), ("sampled", CodeSampling(True, 0.9, 50, 1.0))):
        fast = FramePredictor(predictor, ops, sampling)
        fast.reserve(17)
        for rows in (1, 16):
            h = torch.randn(rows, width, device=DEVICE, dtype=dtype)
            with torch.inference_mode():
                for _ in range(3):  # compile and tune first
                    fast(h, h)
                line = f"launches {name} batch {rows}:"
                if DEVICE.type == "cuda":
                    torch.cuda.synchronize()
                    with profile(activities=[ProfilerActivity.CUDA]) as prof:
                        fast(h, h)
                        torch.cuda.synchronize()
                    kernels = [e.name for e in prof.events() if e.device_type.name == "CUDA"]
                    top = ", ".join(f"{n[:48]} x{c}" for n, c in Counter(kernels).most_common(5))
                    graph = torch.cuda.CUDAGraph()
                    stream = torch.cuda.Stream()
                    stream.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(stream):
                        fast(h, h)
                    torch.cuda.current_stream().wait_stream(stream)
                    with torch.cuda.graph(graph):
                        fast(h, h)
                    times = []
                    for _ in range(50):
                        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        start.record()
                        graph.replay()
                        end.record()
                        end.synchronize()
                        times.append(start.elapsed_time(end))
                    ms = sorted(times)[len(times) // 2]
                    line += (f" {len(kernels)} device ops a frame ({len(kernels) / steps:.1f} a step), graph replay "
                             f"{ms:.3f} ms a frame; top: {top}")
                else:
                    fast(h, h)
                    line += " ran (no device counts off CUDA)"
            print(line, flush=True)


def main() -> int:
    print(f"tts_cp_check on {torch.cuda.get_device_name() if DEVICE.type == 'cuda' else DEVICE}", flush=True)
    ok = golden_codes()
    launches()
    print("tts_cp_check: " + ("ok" if ok else "FAILED (golden codes differ)"), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
