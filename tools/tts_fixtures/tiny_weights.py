"""The tiny Qwen3-TTS checkpoints' weights: every tensor drawn from a generator seeded by the checkpoint's seed and
the tensor's name (a rerun writes the same bytes), stored as bf16 values; the checkpoint and codec folders written
(a part of ``make_qwen3_tts_fixtures.py``)."""

from __future__ import annotations

import json
import math
import re
import shutil
import zlib
from pathlib import Path

import torch
from tiny_configs import (
    CODEC_PREPROCESSOR,
    CODEC_SEED,
    GENERATION_CONFIG,
    KIND_SEEDS,
    TOKENIZER_VOCAB,
    build_tokenizer,
    codec_config,
    model_config,
)

DAMPED = ((re.compile(r"^decoder\.decoder\.\d+\.block\.\d+\.conv[12]\.conv\.weight$"), 0.5),)
"""Codec decoder weights drawn smaller: its residual units compound (the signal's std doubles per upsampling
block at full scale, and the waveform saturates the decoder's [-1, 1] clamp); halved, the waveform's std is
about 0.3."""


def draw(name: str, shape: torch.Size, seed: int) -> torch.Tensor:
    """A float32 tensor for parameter ``name``, from a generator seeded by ``seed`` and the name's CRC-32, rounded to
    bf16 values. Scales keep every stage's activations near unit size: matrices ~ N(0, 1/fan_in), norm weights
    ~ 1 + N(0, 0.1), log-scale activations and layer scales ~ N(0, 0.1), biases ~ N(0, 0.02), codebook usage counts
    in [0.5, 2], codebook sums and embeddings ~ N(0, 1)."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
    normal = torch.randn(shape, generator=gen)
    leaf = name.rsplit(".", 1)[-1]
    if leaf == "cluster_usage":
        value = 0.5 + 1.5 * torch.rand(shape, generator=gen)
    elif leaf in ("embedding_sum",) or (leaf == "weight" and "embed" in name):
        value = normal
    elif leaf in ("alpha", "beta", "scale", "gamma"):
        value = 0.1 * normal
    elif leaf == "bias":
        value = 0.02 * normal
    elif len(shape) == 1:  # RMSNorm / LayerNorm weights
        value = 1.0 + 0.1 * normal
    else:
        fan_in = math.prod(shape[1:])
        value = normal / math.sqrt(fan_in)
        for pattern, factor in DAMPED:
            if pattern.match(name):
                value = value * factor
    return value.to(torch.bfloat16).to(torch.float32)


def randomize(module: torch.nn.Module, seed: int) -> dict[str, torch.Tensor]:
    """Overwrite every parameter and persistent buffer of ``module`` with :func:`draw` values; returns the state dict."""
    state = module.state_dict()
    new = {name: draw(name, tensor.shape, seed) if tensor.is_floating_point() else tensor.clone()
           for name, tensor in sorted(state.items())}
    module.load_state_dict(new, strict=True)
    return new


def save_weights(state: dict[str, torch.Tensor], path: Path) -> None:
    from safetensors.torch import save_file

    save_file({k: v.to(torch.bfloat16).contiguous() if v.is_floating_point() else v.contiguous()
               for k, v in state.items()}, str(path), metadata={"format": "pt"})


def build_checkpoint(kind: str, folder: Path, codec_folder: Path) -> None:
    """Write the tiny ``kind`` checkpoint to ``folder`` (its codec copied from ``codec_folder``)."""
    from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSForConditionalGeneration

    if folder.exists():
        shutil.rmtree(folder)
    special = build_tokenizer(folder)
    config = model_config(kind, special, TOKENIZER_VOCAB)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    (folder / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=2))
    torch.manual_seed(KIND_SEEDS[kind])
    model = Qwen3TTSForConditionalGeneration(Qwen3TTSConfig(**config))
    save_weights(randomize(model, KIND_SEEDS[kind]), folder / "model.safetensors")
    shutil.copytree(codec_folder, folder / "speech_tokenizer")


def build_codec(folder: Path) -> None:
    from qwen_tts.core import Qwen3TTSTokenizerV2Config, Qwen3TTSTokenizerV2Model

    folder.mkdir(parents=True, exist_ok=True)
    config = codec_config()
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    (folder / "preprocessor_config.json").write_text(json.dumps(CODEC_PREPROCESSOR, indent=2))
    torch.manual_seed(CODEC_SEED)
    model = Qwen3TTSTokenizerV2Model(Qwen3TTSTokenizerV2Config(**config))
    save_weights(randomize(model, CODEC_SEED), folder / "model.safetensors")
