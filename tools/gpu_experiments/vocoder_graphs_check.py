"""Issue 27 (tts-vocoder-graphs): the codec decoder's chunks replayed as graphs against eager, at the 1.7B shape.

Random bf16 weights (the released tokenizer's decoder shape, ``tests/audio/reference_configs``), on one GPU:

1. capture (:meth:`anna_audio.speech.vocoder.Vocoder.capture_graphs`, chunks of 1 to 8 frames, buckets up to 16):
   seconds, captured or why not, and GPU memory after;
2. correctness: 5 requests of different lengths streamed (1 frame, then 8, then the rest) through the vocoder with
   graphs and without, and decoded whole: the largest sample differences (graphs vs eager should be ~0; vs whole,
   bf16 rounding);
3. timing as served (``vocoder.decode(...).result()``: upload, replay, copy back) per chunk, ms, median of 20, for
   (streams, frames) in (1, 1), (1, 8), (4, 8), (16, 8), with graphs and eager; and the chunk's launches / syncs
   on the host side of a replay (:class:`anna_core.testing.host_reads.OpCounts`).

Run from the repository root with the wheels installed (stdout; a JSON summary to $OUT/vocoder_graphs.json):
``timeout 280 python3 tools/gpu_experiments/vocoder_graphs_check.py`` (about a minute; ``--device cpu`` is a dry
run that skips the graphs, with ``--fake-graphs`` that replays them on the CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from concurrent.futures import wait

import numpy as np
import torch


def main() -> None:
    from anna_audio.qwen3_tts.codec_decoder import CodecDecoder, phased_min_channels_for
    from anna_audio.qwen3_tts.config import parse_codec
    from anna_audio.qwen3_tts.stream_state import StreamState
    from anna_audio.speech.vocoder import Vocoder
    from anna_core.device import accelerator, memory_stats
    from anna_core.testing.host_reads import OpCounts
    from codec_weights import randomize_codebooks

    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--fake-graphs", action="store_true", help="on the CPU: capture through FakeGraphAccelerator")
    ap.add_argument("--config", default="tests/audio/reference_configs/Qwen3-TTS-Tokenizer-12Hz.json")
    args = ap.parse_args()
    dev = torch.device(args.device)
    with open(args.config) as f:
        cfg = parse_codec(json.load(f)).decoder
    torch.manual_seed(0)
    decoder = CodecDecoder(cfg, phased_min_channels=phased_min_channels_for(dev)).eval()
    randomize_codebooks(decoder)
    decoder = decoder.to(dev, torch.bfloat16 if dev.type != "cpu" else torch.float32)
    accel = accelerator(dev)
    summary: dict = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else str(dev)}

    if args.fake_graphs:
        from anna_core.testing.fake_graphs import FakeGraphAccelerator

        graphed = Vocoder(decoder, FakeGraphAccelerator())
    else:
        graphed = Vocoder(decoder, accel)
    eager = Vocoder(decoder, accel)
    t0 = time.perf_counter()
    ok = graphed.capture_graphs(list(range(1, 9)), 16)  # as the server: every length up to 8 frames
    summary["capture_s"] = time.perf_counter() - t0
    summary["captured"], summary["why_not"] = ok, graphed.why_not_graphs
    summary["memory_after_capture"] = memory_stats(dev)
    print(f"capture: {ok} in {summary['capture_s']:.2f} s ({graphed.why_not_graphs}); memory {summary['memory_after_capture']}")

    gen = torch.Generator().manual_seed(1)
    lengths = [1, 9, 17, 30, 44]
    codes = [torch.randint(0, cfg.codebook_size, (n, cfg.num_quantizers), generator=gen) for n in lengths]
    with torch.inference_mode():
        whole = [w.float().cpu().numpy() for w in decoder.decode([c.to(dev) for c in codes])]

    def stream(vocoder: Vocoder) -> list[np.ndarray]:
        states = [StreamState() for _ in codes]
        out: list[list[np.ndarray]] = [[] for _ in codes]
        starts = [0] * len(codes)
        size = 1
        while any(s < c.shape[0] for s, c in zip(starts, codes)):  # every request's next chunk, together
            futures = []
            for i, c in enumerate(codes):
                if starts[i] < c.shape[0]:
                    futures.append((i, vocoder.decode(states[i], c[starts[i]:starts[i] + size])))
                    starts[i] += size
            wait([f for _, f in futures])
            for i, f in futures:
                out[i].append(f.result())
            size = 8
        return [np.concatenate(p) for p in out]

    got_g, got_e = stream(graphed), stream(eager)
    summary["max_diff_graphs_vs_eager"] = max(float(np.abs(a - b).max()) for a, b in zip(got_g, got_e))
    summary["max_diff_graphs_vs_whole"] = max(float(np.abs(a - b).max()) for a, b in zip(got_g, whole))
    summary["max_diff_eager_vs_whole"] = max(float(np.abs(a - b).max()) for a, b in zip(got_e, whole))
    print(f"max |graphs - eager| {summary['max_diff_graphs_vs_eager']:.3g}, |graphs - whole| "
          f"{summary['max_diff_graphs_vs_whole']:.3g}, |eager - whole| {summary['max_diff_eager_vs_whole']:.3g}")

    summary["chunk_ms"] = {}
    for n, frames in ((1, 1), (1, 8), (4, 8), (16, 8)):
        row = {}
        for name, vocoder in (("graphs", graphed), ("eager", eager)):
            states = [StreamState() for _ in range(n)]
            chunk = torch.randint(0, cfg.codebook_size, (frames, cfg.num_quantizers), generator=gen)
            times = []
            for _ in range(22):
                t = time.perf_counter()
                wait([vocoder.decode(s, chunk) for s in states])
                times.append((time.perf_counter() - t) * 1000)
            row[name] = sorted(times[2:])[10]
        summary["chunk_ms"][f"{n}x{frames}"] = row
        print(f"{n} stream(s) x {frames} frame(s): graphs {row['graphs']:.2f} ms, eager {row['eager']:.2f} ms per chunk "
              f"({row['graphs'] / frames:.2f} / {row['eager'] / frames:.2f} ms per frame)")
    if graphed.graphs is not None:
        states = [StreamState()]
        chunk = torch.zeros(1, 8, cfg.num_quantizers, dtype=torch.int64)
        with OpCounts() as counts:
            graphed.graphs.decode(states, chunk).float().cpu()
        summary["replay_host_ops"] = {"launches": counts.launches, "syncs": counts.syncs, "ops": counts.ops}
        print(f"a replayed chunk on the host: {counts.launches} launches, {counts.syncs} syncs {counts.ops}")
    graphed.close()
    eager.close()
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "vocoder_graphs.json"), "w") as f:
            json.dump(summary, f, indent=2, default=str)


if __name__ == "__main__":
    main()
