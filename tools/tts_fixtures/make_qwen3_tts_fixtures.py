"""Golden fixtures for Anna's Qwen3-TTS port, produced by the upstream reference code.

Qwen3-TTS has no transformers class, so the oracle is the reference package itself (``qwen_tts``, from the PyPI
distribution ``qwen-tts-hf`` 0.1.1.post1: the transformers-5 port of QwenLM/Qwen3-TTS, PR #360). This script

1. builds one tiny random checkpoint of each released kind (``base``, ``custom_voice``, ``voice_design``) in the
   layout of the released folders -- ``config.json``, ``generation_config.json``, ``model.safetensors`` (bf16),
   a byte-level BPE tokenizer (``vocab.json``, ``merges.txt``, ``tokenizer.json``, ``tokenizer_config.json``) and
   ``speech_tokenizer/`` (the 12 Hz codec: ``config.json``, ``model.safetensors``, ``preprocessor_config.json``);
   every tensor is drawn from a generator seeded by the checkpoint's seed and the tensor's name, so a rerun
   writes the same bytes;
2. loads each checkpoint with the reference's own loader (``Qwen3TTSModel.from_pretrained``), checks that every
   saved tensor arrived unchanged, and runs the reference on fixed inputs with greedy decoding (talker and code
   predictor ``do_sample=False``);
3. writes what it produced into ``OUT/golden/``: codec tokens per frame, waveforms, and intermediate tensors for
   debugging (the talker's prefill embeddings, its logits of the first steps, the code predictor's logits of the
   first frame, the codec decoder's stages for given codes, the speaker encoder's mel input and embedding, the
   reference audio's codes, also from a 16 kHz recording; the codec encoder's codes batched and alone, its stages,
   and its codes with a narrow transformer window), one ``<case>.safetensors`` plus one ``<case>.json`` (inputs,
   ids, lengths) each,
   and ``manifest.json`` (versions, device, dtype, seeds).

Everything runs in float32 (weights stored as bf16 values, as the released checkpoints are). It needs the
reference package and what it imports (torch, torchaudio, transformers >= 5.15, librosa, soundfile, sox,
onnxruntime, einops); ``tools/tts_fixtures/run_on_gpu.sh`` runs it on the GPU machine's image.

    python tools/tts_fixtures/make_qwen3_tts_fixtures.py --out tests/audio/fixtures/qwen3_tts --device cpu

The script's parts sit beside it (it runs with this folder first on ``sys.path``): ``tiny_configs.py`` (sizes,
tokenizer, configs), ``tiny_weights.py`` (seeded weights, the checkpoint folders) and ``reference_cases.py``
(running the reference and recording what it computes).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
from pathlib import Path
from typing import Any

import torch
from reference_cases import (
    GREEDY,
    Recorder,
    base_cases,
    codec_decoder_case,
    codec_encoder_case,
    custom_voice_cases,
    load_reference,
    patch_default_rope,
    tokenize,
    voice_design_cases,
)
from tiny_configs import CODEC_SEED, KIND_SEEDS, MAX_FRAMES
from tiny_weights import build_checkpoint, build_codec


def save_golden(folder: Path, name: str, tensors: dict[str, torch.Tensor], facts: dict[str, Any]) -> None:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / f"{name}.safetensors"))
    (folder / f"{name}.json").write_text(json.dumps(facts, indent=1, ensure_ascii=False))


KIND_CASES = {"custom_voice": custom_voice_cases, "voice_design": voice_design_cases, "base": base_cases}
FOLDERS = {"base": "tiny-base", "custom_voice": "tiny-custom-voice", "voice_design": "tiny-voice-design"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="fixtures folder (checkpoints + golden/)")
    parser.add_argument("--device", default="cpu", help="torch device the reference runs on (default: cpu)")
    parser.add_argument("--kinds", default="base,custom_voice,voice_design")
    parser.add_argument("--note", default="", help="a line on the environment, kept in golden/manifest.json")
    parser.add_argument("--reuse-checkpoints", action="store_true",
                        help="run the reference on the checkpoints already in --out instead of rebuilding them")
    args = parser.parse_args(argv)
    import qwen_tts
    import transformers

    torch.use_deterministic_algorithms(True, warn_only=True)
    patch_default_rope()
    out: Path = args.out
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = sorted(set(kinds) - set(FOLDERS))
    if unknown:
        parser.error(f"unknown kinds {unknown}; known: {sorted(FOLDERS)}")
    if not args.reuse_checkpoints:
        codec = out / "_codec_build"
        if codec.exists():
            shutil.rmtree(codec)
        build_codec(codec)
        for kind in kinds:
            build_checkpoint(kind, out / FOLDERS[kind], codec)
        shutil.rmtree(codec)
    golden = out / "golden"
    manifest: dict[str, Any] = {
        "reference": f"qwen_tts {qwen_tts.__version__} (PyPI qwen-tts-hf; QwenLM/Qwen3-TTS PR #360)",
        "torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version(),
        "device": args.device, "dtype": "float32 (weights: bf16 values)", "attn_implementation": "eager",
        "seeds": {**KIND_SEEDS, "codec": CODEC_SEED}, "max_new_tokens": MAX_FRAMES, "generation": GREEDY,
        "checkpoints": {kind: FOLDERS[kind] for kind in kinds}, "note": args.note,
    }
    for kind in kinds:
        tts = load_reference(out / FOLDERS[kind], args.device)
        rec = Recorder(tts)
        tensors: dict[str, torch.Tensor] = {}
        cases = KIND_CASES[kind](tts, rec, tensors)
        rec.close()
        for case in cases.values():
            if isinstance(case, dict) and "text" in case:
                case["input_ids"] = [tokenize(tts, f"<|im_start|>assistant\n{t}<|im_end|>\n<|im_start|>assistant\n")
                                     for t in case["text"]]
                if "instruct" in case:
                    case["instruct_ids"] = [tokenize(tts, f"<|im_start|>user\n{t}<|im_end|>\n") if t else None
                                            for t in case["instruct"]]
        save_golden(golden, kind, tensors, {"kind": kind, "cases": cases})
        if kind == kinds[0]:  # the kinds share one codec
            codec_tensors: dict[str, torch.Tensor] = {}
            facts = {"decoder": codec_decoder_case(tts, codec_tensors),
                     "encoder": codec_encoder_case(tts, codec_tensors)}
            save_golden(golden, "codec", codec_tensors, facts)
        print(f"{kind}: " + ", ".join(f"{name} frames {c['frames']}" for name, c in cases.items()
                                       if isinstance(c, dict) and "frames" in c), flush=True)
    (golden / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
