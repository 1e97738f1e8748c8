"""Transcription benchmark: ``python -m anna_audio.bench`` -- Anna's engine against HF transformers, same process.

Every request is a distinct clip of ``--clip-seconds`` of noise (distinct, so no encoder-cache or prefix-cache hit
flatters the figures), and produces exactly ``ceil(clip_seconds * tokens_per_second)`` output tokens (EOS ignored),
so both sides do the same work whatever the random weights say. Anna runs the ``transcribe`` task's engine (the
same ``LLMEngine`` ``anna serve`` drives, graphs captured on a GPU); HF runs ``Qwen3ASRForConditionalGeneration.
generate`` on batches of the same inputs.

Reported per side: the real-time factor of one request (wall seconds / audio seconds; lower is better) and, for
each concurrency, audio seconds transcribed per wall second (all requests submitted at once; HF as one batch).
Anna's figures include the log-mel features (computed in the engine's steps on the model's device, each encoder
group's clips together, as the server does; ``prep_s`` is the prompts and media items on the host); HF's start from
features computed beforehand with transformers' extractor on the host (not timed).

Example (H200, the 1.7B shape with random weights; the folder holds only ``config.json``)::

    mkdir -p /tmp/asr17 && cp tests/qwen3_asr/reference_configs/Qwen3-ASR-1.7B.json /tmp/asr17/config.json
    python -m anna_audio.bench --model-dir /tmp/asr17 --load-format dummy --dtype bf16 \\
        --clip-seconds 20 --tokens-per-second 4 --concurrency 1,32,128 --hf
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

RATE = 16000
WARMUP_TOKENS = 4
"""Output tokens of each warm-up run (one per concurrency, on other clips, before the timed runs)."""


def clips(n: int, seconds: float, seed: int = 0) -> list[np.ndarray]:
    """``n`` distinct ``[seconds * 16000]`` float32 noise clips."""
    rng = np.random.default_rng(seed)
    return [(0.1 * rng.standard_normal(round(seconds * RATE))).astype(np.float32) for _ in range(n)]


def prompt_ids(loaded: Any) -> list[int]:
    """A transcription prompt with one audio placeholder: the family's own (checkpoints with a tokenizer), else
    a few fixed ids around the placeholder (a ``config.json``-only folder)."""
    from anna_audio.qwen3_asr.prompt import build_transcription_prompt

    if loaded.tokenizer is not None:
        return build_transcription_prompt(loaded.tokenizer, language=None, context=None)
    audio = loaded.model.asr_config.audio_token_id
    return [11, 12, 13, audio, 14, 15]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def anna_run(engine: Any, loaded: Any, audio: list[np.ndarray], max_tokens: int) -> dict[str, Any]:
    """Submit every clip at once to the synchronous engine and step until all finish.

    Returns:
        ``{"requests", "prep_s", "engine_s", "wall_s", "output_tokens", "steps", "encode_device_s"}``: seconds of wall
        time (``prep_s``: prompts and media items on the host; ``engine_s``: the engine's steps, the features and the
        encoder included), engine steps taken, and the device seconds of the encoder calls (features included).
    """
    from anna_core.engine.sampling_params import SamplingParams

    ids = prompt_ids(loaded)
    params = SamplingParams(max_tokens=max_tokens, min_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    encoded_before = engine.stats()["encoder"]["encode_device_s"]
    t0 = time.perf_counter()
    prepared = [loaded.processor.process(ids, {"audio": [x]}) for x in audio]
    t1 = time.perf_counter()
    for i, (expanded, mm) in enumerate(prepared):
        engine.add_request(f"bench-{time.monotonic_ns()}-{i}", expanded, params, multimodal=mm)
    tokens = steps = 0
    while engine.has_unfinished():
        steps += 1
        for out in engine.step():
            if out.finished:
                tokens += len(out.token_ids)
    _sync(loaded.device)
    t2 = time.perf_counter()
    encoded = engine.stats()["encoder"]["encode_device_s"] - encoded_before
    return {"requests": len(audio), "prep_s": t1 - t0, "engine_s": t2 - t1, "wall_s": t2 - t0,
            "output_tokens": tokens, "steps": steps, "encode_device_s": round(encoded, 6)}


def hf_model(loaded: Any, model_dir: Path, dummy: bool) -> Any:
    """transformers' ``Qwen3ASRForConditionalGeneration`` of the checkpoint (random weights for a dummy load), on
    ``loaded``'s device and dtype."""
    from transformers import Qwen3ASRConfig, Qwen3ASRForConditionalGeneration

    from anna_audio.qwen3_asr.config import hf_form

    if not dummy:
        return Qwen3ASRForConditionalGeneration.from_pretrained(str(model_dir), dtype=loaded.dtype).to(
            loaded.device).eval()
    cfg = Qwen3ASRConfig(**hf_form(json.loads((model_dir / "config.json").read_text())))
    with torch.device(loaded.device):
        model = Qwen3ASRForConditionalGeneration._from_config(cfg, dtype=loaded.dtype)
    return model.eval()


def hf_run(model: Any, loaded: Any, audio: list[np.ndarray], max_tokens: int) -> dict[str, Any]:
    """One ``generate`` over all clips as a batch (the same expanded prompt and features Anna gets)."""
    ids = prompt_ids(loaded)
    prepared = [loaded.processor.process(ids, {"audio": [x]}) for x in audio]
    feats = [loaded.processor.features(x) for x in audio]  # transformers' extractor, one clip at a time
    frames = max(f.features.shape[1] for f in feats)
    device = loaded.device
    x = torch.zeros(len(feats), feats[0].features.shape[0], frames, dtype=loaded.dtype, device=device)
    mask = torch.zeros(len(feats), frames, dtype=torch.long, device=device)
    for i, f in enumerate(feats):
        x[i, :, :f.features.shape[1]] = f.features.to(device=device, dtype=loaded.dtype)
        mask[i, :f.num_frames] = 1
    lengths = {len(e) for e, _ in prepared}
    if len(lengths) != 1:
        raise ValueError("hf_run needs clips of one length")
    input_ids = torch.tensor([e for e, _ in prepared], device=device)
    _sync(device)
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), input_features=x,
                             input_features_mask=mask, max_new_tokens=max_tokens, min_new_tokens=max_tokens,
                             do_sample=False, eos_token_id=None, pad_token_id=0)
    _sync(device)
    wall = time.perf_counter() - t0
    return {"requests": len(audio), "wall_s": wall, "output_tokens": int((out.shape[1] - input_ids.shape[1])
                                                                        * out.shape[0])}


def summarize(run: dict[str, Any], clip_seconds: float) -> dict[str, Any]:
    """Adds ``audio_s``, ``rtf`` (wall / audio seconds of one request's worth) and ``audio_s_per_s``."""
    audio_s = run["requests"] * clip_seconds
    return {**run, "audio_s": audio_s, "rtf": run["wall_s"] / clip_seconds if run["requests"] == 1 else None,
            "audio_s_per_s": audio_s / run["wall_s"]}


def run_bench(model_dir: str | Path, *, load_format: str = "auto", device: str = "auto", dtype: str = "auto",
              clip_seconds: float = 20.0, tokens_per_second: float = 4.0, concurrency: tuple[int, ...] = (1, 32, 128),
              hf: bool = False, warmup: bool = True, cuda_graph: bool = True) -> dict[str, Any]:
    """Load the model once, run Anna (and HF with ``hf``) at each concurrency; returns the JSON-ready report.

    Raises:
        ValueError: a non-positive clip length, token rate or concurrency.
    """
    from anna_core.engine.config import EngineConfig
    from anna_core.engine.model_runner import RunnerConfig
    from anna_core.loading import load_model

    from anna_audio.transcribe.task import build

    if clip_seconds <= 0 or tokens_per_second <= 0 or not concurrency or min(concurrency) < 1:
        raise ValueError("clip_seconds, tokens_per_second and every concurrency must be positive")
    model_dir = Path(model_dir)
    max_tokens = math.ceil(clip_seconds * tokens_per_second)
    loaded = load_model(model_dir, device=device, dtype=dtype, load_format=load_format,
                        family_options={"asr_max_inference_batch_size": max(concurrency)})
    runner = RunnerConfig(cuda_graph=cuda_graph, warmup=warmup and loaded.device.type != "cpu")
    built = build(loaded, EngineConfig(max_num_seqs=max(concurrency)), runner)
    engine = built.engine
    report: dict[str, Any] = {
        "model_dir": str(model_dir), "device": str(loaded.device), "dtype": str(loaded.dtype).replace("torch.", ""),
        "clip_seconds": clip_seconds, "tokens_per_second": tokens_per_second, "output_tokens_per_request": max_tokens,
        "anna": {}, "hf": {},
    }
    if warmup:  # every concurrency once (other clips, few tokens): its prefill, encoder and decode shapes compile
        for n in concurrency:  # and autotune here, not in the timed run
            anna_run(engine, loaded, clips(n, clip_seconds, seed=10_000 + n), min(max_tokens, WARMUP_TOKENS))
    for n in concurrency:
        report["anna"][str(n)] = summarize(anna_run(engine, loaded, clips(n, clip_seconds, seed=n), max_tokens),
                                           clip_seconds)
    if hf:
        # Anna's engine (its KV pool, graphs) is released first: HF runs on the device memory Anna's engine held
        # (at 128 clips of 20 s its encoder's convolutions alone take ~7 GiB on a 1.7B shape)
        del engine, built
        gc.collect()
        if loaded.device.type == "cuda":
            torch.cuda.empty_cache()
        model = hf_model(loaded, model_dir, load_format == "dummy")
        if warmup:
            for n in concurrency:
                hf_run(model, loaded, clips(n, clip_seconds, seed=20_000 + n), min(max_tokens, WARMUP_TOKENS))
        for n in concurrency:
            report["hf"][str(n)] = summarize(hf_run(model, loaded, clips(n, clip_seconds, seed=n), max_tokens),
                                             clip_seconds)
    return report


def main(argv: list[str] | None = None) -> None:
    """``python -m anna_audio.bench``: prints the report as JSON and a summary line per side."""
    parser = argparse.ArgumentParser(prog="python -m anna_audio.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--load-format", default="auto", choices=("auto", "safetensors", "dummy"))
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--clip-seconds", type=float, default=20.0)
    parser.add_argument("--tokens-per-second", type=float, default=4.0)
    parser.add_argument("--concurrency", default="1,32,128", help="comma-separated request counts")
    parser.add_argument("--hf", action="store_true", help="also run HF transformers' generate")
    parser.add_argument("--no-warmup", action="store_true")
    parser.add_argument("--no-cuda-graph", action="store_true")
    parser.add_argument("--json-out", default=None, help="also write the report here")
    args = parser.parse_args(argv)
    report = run_bench(args.model_dir, load_format=args.load_format, device=args.device, dtype=args.dtype,
                       clip_seconds=args.clip_seconds, tokens_per_second=args.tokens_per_second,
                       concurrency=tuple(int(c) for c in args.concurrency.split(",")), hf=args.hf,
                       warmup=not args.no_warmup, cuda_graph=not args.no_cuda_graph)
    text = json.dumps(report, indent=2)
    print(text)
    if args.json_out:
        Path(args.json_out).write_text(text)
    for side in ("anna", "hf"):
        for n, r in report[side].items():
            rtf = f"RTF {r['rtf']:.4f}, " if r["rtf"] is not None else ""
            print(f"{side} x{n}: {rtf}{r['audio_s_per_s']:.1f} audio s/s ({r['wall_s']:.2f} s wall)")


if __name__ == "__main__":
    main()
