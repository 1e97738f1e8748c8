"""Qwen3-TTS voice cloning on a CUDA GPU (issue 27): the codec encoder and speaker encoder against the golden
fixtures on the device, and their time on one recording at released widths.

Self-contained (the committed tiny fixtures, random weights at the released widths, no network). Run from the
repository root with the Anna wheels installed (or ``PYTHONPATH=anna-core/src:anna-audio/src``)::

    timeout 280 python3 tools/gpu_experiments/tts_voice_clone_check.py [--device cuda] > $OUT/voice_clone.txt

Lines:

* ``golden tf32=<on|off>``: the tiny Base checkpoint's cloner on the device (float32) for the 1.2 s golden
  recording: codes equal to the reference's (share of entries), the x-vector's largest difference, the transcript
  ids equal. With TF32 off the codes should equal exactly and the x-vector differ by < 1e-4; with TF32 on (the
  convolutions' default on Ampere and later) a few codes may flip.
* ``timing <what> <seconds> s``: median milliseconds of ``--runs`` calls after two warm-ups, float32, for the codec
  encoder at the Mimi defaults the 12 Hz tokenizer starts from (512 wide, 8 layers, 32 codebooks of 2048, 16
  kept) and the Base 1.7B speaker encoder (2048-wide x-vector, reference defaults), on 3 s, 10 s and 30 s of audio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

FIXTURES = Path("tests/audio/fixtures/qwen3_tts")


def golden_check(device: str) -> None:
    from anna_audio.qwen3_tts import load_config
    from anna_audio.qwen3_tts.voice_clone import load_voice_cloner
    from safetensors.torch import load_file
    from tokenizers import Tokenizer

    folder = FIXTURES / "tiny-base"
    g = load_file(str(FIXTURES / "golden" / "base.safetensors"))
    facts = json.loads((FIXTURES / "golden" / "base.json").read_text())["cases"]
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    control = tuple(t.content for t in tok.get_added_tokens_decoder().values())
    cloner = load_voice_cloner(folder, load_config(folder), lambda s: tok.encode(s).ids, control=control,
                               device=device)
    for tf32 in (True, False):
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
        prompt = cloner.prompt(g["ref/audio"].numpy(), 24000, facts["ref_text"])
        same = (prompt.ref_codes.cpu() == g["ref/codes"]).float().mean().item()
        err = (prompt.speaker_embedding.cpu() - g["ref/speaker_embedding"]).abs().max().item()
        print(f"golden tf32={'on' if tf32 else 'off'}: codes equal {same:.3f}, x-vector max |diff| {err:.2e}, "
              f"ids equal {prompt.ref_ids.tolist() == facts['ref_text_ids']}", flush=True)
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False


def _median_ms(fn, runs: int, device: str) -> float:
    times = []
    for i in range(runs + 2):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        if i >= 2:
            times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def timing(device: str, runs: int, seconds: list[float]) -> None:
    from anna_audio.qwen3_tts.codec_encoder import CodecEncoder
    from anna_audio.qwen3_tts.codec_encoder_config import parse_codec_encoder
    from anna_audio.qwen3_tts.config import parse_speaker_encoder
    from anna_audio.qwen3_tts.speaker_encoder import SpeakerEncoder, speaker_mels

    codec = {"model_type": "qwen3_tts_tokenizer_12hz", "encoder_valid_num_quantizers": 16,
             "encoder_config": {"_frame_rate": 12.5}}
    torch.manual_seed(0)
    encoder = CodecEncoder(parse_codec_encoder(codec), 16)
    for name, p in encoder.named_parameters():
        if name.endswith("embed_sum"):
            p.data.normal_()
    encoder = encoder.to(device).eval()
    speaker = SpeakerEncoder(parse_speaker_encoder({"enc_dim": 2048, "sample_rate": 24000})).to(device).eval()
    params = sum(p.numel() for p in encoder.parameters()) / 1e6
    print(f"codec encoder {params:.1f} M parameters; speaker encoder "
          f"{sum(p.numel() for p in speaker.parameters()) / 1e6:.1f} M", flush=True)
    for s in seconds:
        audio = 0.1 * torch.randn(int(s * 24000), device=device)
        ms = _median_ms(lambda audio=audio: encoder.encode([audio]), runs, device)
        print(f"timing codec-encoder {s:g} s: {ms:.2f} ms", flush=True)

        def embed(audio=audio) -> None:
            with torch.inference_mode():
                speaker(speaker_mels(audio)[None])

        print(f"timing speaker-encoder {s:g} s: {_median_ms(embed, runs, device):.2f} ms", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--seconds", default="3,10,30")
    args = parser.parse_args()
    print(f"device {args.device}: {torch.cuda.get_device_name() if args.device.startswith('cuda') else 'cpu'}, "
          f"torch {torch.__version__}", flush=True)
    golden_check(args.device)
    timing(args.device, args.runs, [float(s) for s in args.seconds.split(",")])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
