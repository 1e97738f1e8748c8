"""Issue 26 review (asr-fix): the log-mel features on CUDA and the segmented encoder, at the Qwen3-ASR-1.7B shape.

1. ``LogMelFeatures.batch`` on the GPU (32 clips of 1-30 s, one STFT) against transformers' extractor on the CPU,
   clip by clip: the largest absolute difference (``anna_audio.features.BATCH_TOLERANCE`` is the bound) and the
   batch's time against the CPU loop's.
2. One 1200 s clip through the encoder (random bf16 weights): peak GPU memory and time with the released
   ``conv_chunksize`` (500 chunks a call: the clip runs in window-aligned segments) and with a budget past the clip
   (one call over all 12,000 chunks, as before); the rows of both must agree.

Run from the repository root with the wheels installed: ``python3 tools/gpu_experiments/asr_device_check.py``
(about a minute; writes nothing but its stdout; ``--device cpu --seconds 20`` is a quick dry run).
"""

from __future__ import annotations

import argparse
import json
import time

import attrs
import numpy as np
import torch


def features_check(device: str) -> None:
    from anna_audio.features import BATCH_TOLERANCE, LogMelFeatures

    feats = LogMelFeatures()
    rng = np.random.default_rng(0)
    clips = [(0.1 * rng.standard_normal(int(16000 * s))).astype(np.float32) for s in np.linspace(1.0, 30.0, 32)]
    feats.batch(clips[:2], device)  # cuFFT plans, kernels
    sync(device)
    t0 = time.perf_counter()
    got = feats.batch(clips, device)
    sync(device)
    t1 = time.perf_counter()
    refs = [feats(c) for c in clips]
    t2 = time.perf_counter()
    worst = max((g.features.cpu() - r.features).abs().max().item() for g, r in zip(got, refs))
    same = all(g.num_frames == r.num_frames and g.features.shape == r.features.shape for g, r in zip(got, refs))
    print(json.dumps({"features_max_abs_diff": worst, "tolerance": BATCH_TOLERANCE, "within": worst <= BATCH_TOLERANCE,
                      "shapes_equal": same, "gpu_batch_s": round(t1 - t0, 4), "cpu_per_clip_s": round(t2 - t1, 4)}))


def encoder_check(device: str, seconds: float) -> None:
    from anna_audio.features import LogMelFeatures
    from anna_audio.qwen3_asr.config import Qwen3ASRConfig
    from anna_audio.qwen3_asr.model import Qwen3ASRModel, build_encoder, materialize_encoder_buffers
    from anna_audio.qwen3_asr.processor import Qwen3ASRProcessor
    from anna_core.kernels.registry import KernelRegistry, bind_ops

    raw = json.load(open("tests/qwen3_asr/reference_configs/Qwen3-ASR-1.7B.json"))
    cfg = Qwen3ASRConfig.from_hf(raw)
    features = LogMelFeatures(n_window=cfg.encoder.n_window)
    torch.manual_seed(0)
    with torch.device(device):
        encoder = build_encoder(cfg).to(torch.bfloat16)
    materialize_encoder_buffers(encoder, torch.device(device))
    audio = (0.1 * np.random.default_rng(1).standard_normal(int(16000 * seconds))).astype(np.float32)
    processor = Qwen3ASRProcessor(features, cfg.audio_token_id)
    _, mm = processor.process([cfg.audio_token_id], {"audio": [audio]})
    rows = {}
    for name, chunks in (("segmented", cfg.encoder.conv_chunksize), ("whole", 10 ** 6)):
        c = attrs.evolve(cfg, encoder=attrs.evolve(cfg.encoder, conv_chunksize=chunks))
        with torch.device("meta"):
            model = Qwen3ASRModel(c, bind_ops(KernelRegistry([]), device, torch.bfloat16), encoder, features)
        model.audio_tower = encoder
        model.multi_modal_projector = torch.nn.Identity()
        model.model.embed_tokens.weight = torch.nn.Parameter(torch.zeros(1, 1, device=device, dtype=torch.bfloat16))
        cuda = device.startswith("cuda")
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated() if cuda else 0
        sync(device)
        t0 = time.perf_counter()
        try:
            [out] = model.encode(list(mm.items))
            sync(device)
            rows[name] = out
            status = "ok"
        except torch.OutOfMemoryError as exc:
            status = f"out of memory: {str(exc)[:120]}"
        print(json.dumps({"encoder": name, "conv_chunksize": chunks, "status": status,
                          "seconds": round(time.perf_counter() - t0, 3),
                          "peak_gib": round((torch.cuda.max_memory_allocated() - base) / 2**30, 3) if cuda else None}))
    if len(rows) == 2:
        a, b = rows["segmented"].float(), rows["whole"].float()
        print(json.dumps({"rows": list(a.shape), "rel_err_segmented_vs_whole": ((a - b).norm() / b.norm()).item()}))


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--seconds", type=float, default=1200.0, help="the long clip's length")
    args = parser.parse_args()
    features_check(args.device)
    encoder_check(args.device, args.seconds)
