"""The reference implementation (``qwen_tts`` of PyPI ``qwen-tts-hf``, the transformers-5 port of QwenLM/Qwen3-TTS)
at a Qwen3-TTS shape with its own random initialisation, for ``tts_bench.sh``'s side-by-side figures.

Runs where ``qwen_tts`` imports (the GPU machine, its wheels carried in ``.whl_tts/``, see tools/tts_fixtures/README.md).
The shape's ``config.json`` is used as a VoiceDesign checkpoint (same talker, code predictor and codec; the reference's
Base path needs reference audio), one request of a fixed synthetic text, then ``--concurrency`` requests as one batch
(the reference batches by padding): ``model.generate`` (talker + code predictor, sampling from the released defaults,
at most ``--frames`` frames: random weights may pick EOS earlier, so the figures are per produced frame too) and the
codec decoder's ``chunked_decode`` of the codes. Prints one JSON line (``reference: {...}``) and writes ``--out``.

    python3 tools/gpu_experiments/tts_reference_bench.py --shape Qwen3-TTS-12Hz-1.7B-Base --frames 125 --concurrency 16
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "tests" / "audio" / "reference_configs"
FRAME_S = 0.08
SAMPLING = {"do_sample": True, "top_k": 50, "top_p": 1.0, "temperature": 0.9, "repetition_penalty": 1.05,
            "subtalker_dosample": True, "subtalker_top_k": 50, "subtalker_top_p": 1.0, "subtalker_temperature": 0.9}


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def build(shape: str, device: str, dtype: torch.dtype):
    sys.path.insert(0, str(ROOT / "tools" / "tts_fixtures"))
    from make_qwen3_tts_fixtures import patch_default_rope  # the fixtures' shim for transformers 5's rotary table
    from qwen_tts.core import Qwen3TTSTokenizerV2Config, Qwen3TTSTokenizerV2Model
    from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSForConditionalGeneration

    patch_default_rope()
    config = json.loads((CONFIGS / f"{shape}.json").read_text())
    config["tts_model_type"] = "voice_design"
    codec = json.loads((CONFIGS / "Qwen3-TTS-Tokenizer-12Hz.json").read_text())
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3TTSForConditionalGeneration(Qwen3TTSConfig(**config)).to(dtype).eval()
        decoder = Qwen3TTSTokenizerV2Model(Qwen3TTSTokenizerV2Config(**codec)).decoder.to(dtype).eval()
    return model, decoder, config


def run(model, decoder, config, n: int, frames: int, text_tokens: int, device: str) -> dict:
    vocab = config["talker_config"]["text_vocab_size"]
    wrap = [config["im_start_token_id"], 77091, 198]
    ids = []
    for i in range(n):
        gen = torch.Generator().manual_seed(i)
        words = torch.randint(10, vocab, (text_tokens,), generator=gen).tolist()
        ids.append(torch.tensor([wrap + words + [config["im_end_token_id"], 198] + wrap], device=device))
    _sync()
    t0 = time.perf_counter()
    with torch.no_grad():
        codes, _ = model.generate(input_ids=ids, instruct_ids=[None] * n, languages=["auto"] * n,
                                  non_streaming_mode=True, max_new_tokens=frames + 1, **SAMPLING)
    _sync()
    t1 = time.perf_counter()
    with torch.no_grad():
        for c in codes:
            if c.shape[0]:
                decoder.chunked_decode(c.to(device).t()[None].long())
    _sync()
    t2 = time.perf_counter()
    made = [int(c.shape[0]) for c in codes]
    audio_s = max(made) * FRAME_S
    return {"requests": n, "frames": made, "generate_s": t1 - t0, "decode_s": t2 - t1, "wall_s": t2 - t0,
            "rtf_of_longest": (t2 - t0) / audio_s if audio_s else None,
            "s_per_frame_step": (t1 - t0) / max(max(made), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="Qwen3-TTS-12Hz-1.7B-Base")
    parser.add_argument("--frames", type=int, default=125)
    parser.add_argument("--text-tokens", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model, decoder, config = build(args.shape, device, torch.bfloat16 if device == "cuda" else torch.float32)
    run(model, decoder, config, 1, 4, args.text_tokens, device)  # warm-up
    report = {"shape": args.shape, "device": device, "one": run(model, decoder, config, 1, args.frames,
                                                                 args.text_tokens, device),
              "batch": run(model, decoder, config, args.concurrency, args.frames, args.text_tokens, device)}
    print("reference:", json.dumps(report))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
