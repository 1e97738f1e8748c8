"""Shared helpers of the Qwen3-ASR tests: the tiny random checkpoint in both layouts, generated clips, and HF
transformers' side of each comparison (``Qwen3ASRProcessor`` builds the prompt and the features,
``Qwen3ASRForConditionalGeneration`` generates and scores)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

RATE = 16000


def clip(freq: float, seconds: float, seed: int, noise: float = 0.1) -> np.ndarray:
    """``[seconds * 16000]`` float32: a tone of ``freq`` Hz (amplitude 0.3) plus seeded Gaussian noise."""
    t = np.arange(int(RATE * seconds)) / RATE
    rng = np.random.RandomState(seed)
    return (0.3 * np.sin(2 * np.pi * freq * t) + noise * rng.randn(t.size)).astype(np.float32)


def load_anna(path: Path, *, dtype: torch.dtype = torch.float32, **options):
    """Load ``path`` on the CPU through family selection (``options``: the family's load options)."""
    from anna_core.loading import load_model

    return load_model(path, device="cpu", dtype=dtype, family_options=options or None)


@pytest.fixture(scope="session")
def tiny_asr(tmp_path_factory) -> Path:
    from anna_audio.qwen3_asr.tiny import build_tiny_checkpoint

    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny-asr") / "hf")


@pytest.fixture(scope="session")
def tiny_asr_original(tiny_asr, tmp_path_factory) -> Path:
    """:func:`tiny_asr` rewritten into the original release layout."""
    from anna_audio.qwen3_asr.tiny import to_original_layout

    return to_original_layout(tiny_asr, tmp_path_factory.mktemp("tiny-asr-original") / "original")


@pytest.fixture(scope="session")
def hf_asr(tiny_asr):
    from anna_core.testing.oracle import hf_model

    return hf_model(tiny_asr)


@pytest.fixture(scope="session")
def hf_processor(tiny_asr):
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(str(tiny_asr))


def hf_request(processor, audio: np.ndarray, *, language: str | None = None, context: str | None = None) -> dict:
    """HF's model inputs of one transcription request (``Qwen3ASRProcessor.apply_transcription_request``)."""
    out = processor.apply_transcription_request(audio=audio, language=language, prompt=context)
    return {k: out[k] for k in ("input_ids", "attention_mask", "input_features", "input_features_mask")}


def hf_logits(model, inputs: dict, generated: list[int]) -> torch.Tensor:
    """HF's float32 logits ``[P + len(generated), vocab]`` over the prompt and ``generated`` (one pass, no cache)."""
    ids = torch.cat([inputs["input_ids"], torch.tensor([generated], dtype=torch.int64)], dim=1)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids), input_features=inputs["input_features"],
                    input_features_mask=inputs["input_features_mask"], use_cache=False)
    return out.logits[0].float()


@torch.inference_mode()
def anna_logits(model, ids: list[int], mm, chunk: int | None = None, block_size: int = 16,
                dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Anna's float32 logits ``[len(ids), vocab]`` over one sequence, prefilled in chunks of ``chunk`` tokens (all at
    once by default) with the audio rows of ``mm`` spliced in (``dtype``: the model's, for its KV cache)."""
    from anna_core.engine.cache_allocator import zeroed_caches
    from anna_core.testing.runner import build_batch

    blocks = -(-len(ids) // block_size)
    caches = zeroed_caches(model.cache_spec, num_blocks=blocks, block_size=block_size, num_slots=1,
                           device=torch.device("cpu"), dtype=dtype)
    embeds = torch.zeros(len(ids), model.hidden_size, dtype=dtype)
    mask = torch.zeros(len(ids), dtype=torch.bool)
    for m, rows in zip(mm.items, model.encode(list(mm.items))):
        embeds[m.offset:m.end], mask[m.offset:m.end] = rows, True
    step, out = chunk or len(ids), []
    for start in range(0, len(ids), step):
        end = min(start + step, len(ids))
        batch = build_batch([(ids[start:end], start)], block_size=block_size, blocks_per_seq=blocks,
                            device=torch.device("cpu"), spec=model.cache_spec)
        batch.embeds, batch.embeds_mask = embeds[start:end], mask[start:end]
        out.append(model.compute_logits(model(batch, caches)))
    return torch.cat(out)


def rel_err(mine: torch.Tensor, ref: torch.Tensor) -> float:
    """``max|mine - ref| / max|ref|``."""
    return ((mine - ref).abs().max() / ref.abs().max()).item()
