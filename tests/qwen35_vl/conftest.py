"""Shared helpers of the Qwen3.5 vision-language tests: a tiny random checkpoint that takes images, small random
images, and HF transformers' side of each comparison (the processor inputs built as HF's ``Qwen3VLProcessor``
builds them: one ``<|image_pad|>`` per image replaced by ``grid.prod() / merge^2`` copies)."""

from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import pytest
import torch

PROMPT_ONE = "<|im_start|>user\nWhat is in <|vision_start|><|image_pad|><|vision_end|> this picture?<|im_end|>\n"
PROMPT_TWO = ("<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|> and "
              "<|vision_start|><|image_pad|><|vision_end|>: compare them.<|im_end|>\n")


def random_image(seed: int, height: int, width: int):
    """A ``height x width`` RGB PIL image of seeded random pixels."""
    from PIL import Image

    pixels = np.random.RandomState(seed).randint(0, 256, (height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def solid_image(rgb: tuple[int, int, int], height: int, width: int):
    """A ``height x width`` PIL image of one colour."""
    from PIL import Image

    return Image.new("RGB", (width, height), rgb)


@pytest.fixture(scope="session")
def tiny_vl(tmp_path_factory) -> Path:
    from anna_core.testing.checkpoints import build_tiny_qwen35_vl

    return build_tiny_qwen35_vl(tmp_path_factory.mktemp("tiny-qwen35-vl"))


@pytest.fixture(scope="session")
def tiny_vl_moe(tmp_path_factory) -> Path:
    """The mixture-of-experts layout (``Qwen3_5MoeForConditionalGeneration``) with the same vision tower."""
    from anna_core.testing.checkpoints import build_tiny_qwen35_vl

    return build_tiny_qwen35_vl(tmp_path_factory.mktemp("tiny-qwen35-vl-moe"), moe=True)


@pytest.fixture(scope="session")
def hf_vl(tiny_vl):
    from anna_core.testing.oracle import hf_model

    return hf_model(tiny_vl)


def hf_inputs(path: Path, text: str, images: list, **image_kwargs) -> dict[str, torch.Tensor]:
    """HF's model inputs for ``text`` (one ``<|image_pad|>`` per image) and ``images``, as ``Qwen3VLProcessor``
    makes them (it cannot be built here: its video processor needs torchvision); ``image_kwargs`` go to the image
    processor (``size=``)."""
    from transformers import AutoTokenizer, Qwen2VLImageProcessorPil

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    if not images:
        ids = torch.tensor([tokenizer.encode(text)])
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    image_processor = Qwen2VLImageProcessorPil.from_pretrained(str(path))
    pixels = image_processor(images=images, return_tensors="pt", **image_kwargs)
    merge = image_processor.merge_size**2
    parts = text.split("<|image_pad|>")
    assert len(parts) == len(images) + 1
    expanded = parts[0]
    for grid, part in zip(pixels["image_grid_thw"], parts[1:]):
        expanded += "<|image_pad|>" * int(grid.prod() // merge) + part
    ids = torch.tensor([tokenizer.encode(expanded)])
    image_id = tokenizer.convert_tokens_to_ids("<|image_pad|>")
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "mm_token_type_ids": (ids == image_id).int(),
            "pixel_values": pixels["pixel_values"], "image_grid_thw": pixels["image_grid_thw"]}


def hf_logits_vl(model, inputs: dict[str, torch.Tensor], generated: list[int]) -> torch.Tensor:
    """HF's float32 logits ``[P + len(generated), vocab]`` over the prompt and ``generated`` (no cache): the image
    features at the prompt's placeholders only (a generated ``<|image_pad|>`` is a token, as in ``generate``), the
    positions after the prompt continuing by HF's rope delta."""
    ids = torch.cat([inputs["input_ids"], torch.tensor([generated], dtype=torch.int64)], dim=1)
    m = model.model
    pos, delta = m.get_rope_index(inputs["input_ids"], inputs["mm_token_type_ids"], inputs["image_grid_thw"])
    P = inputs["input_ids"].shape[1]
    tail = (torch.arange(P, P + len(generated)) + delta[0, 0]).view(1, 1, -1).expand(3, 1, -1)
    with torch.no_grad():
        embeds = model.get_input_embeddings()(ids)
        features = torch.cat(m.get_image_features(inputs["pixel_values"], inputs["image_grid_thw"]).pooler_output)
        mask = torch.zeros(ids.shape, dtype=torch.bool)
        mask[:, :P] = inputs["mm_token_type_ids"].bool()
        embeds[mask] = features.to(embeds.dtype)
        out = model(inputs_embeds=embeds, attention_mask=torch.ones_like(ids),
                    position_ids=torch.cat([pos, tail], dim=2), use_cache=False)
    return out.logits[0].float()


def hf_video_text(text: str, grids: list[list[int]], metadata: list[tuple[float, list[int], int]]) -> str:
    """``text`` with each ``<|video_pad|>`` replaced as transformers' ``Qwen3VLProcessor.replace_video_token``
    replaces it (its method run on a stand-in for the processor, whose video processor needs torchvision);
    ``metadata``: per video, the source fps, the sampled frames' indices and the source's frame count."""
    from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor
    from transformers.video_utils import VideoMetadata

    stand_in = types.SimpleNamespace(video_processor=types.SimpleNamespace(merge_size=2, temporal_patch_size=2),
                                     video_token="<|video_pad|>", vision_start_token="<|vision_start|>",
                                     vision_end_token="<|vision_end|>")
    stand_in._calculate_timestamps = lambda *a: Qwen3VLProcessor._calculate_timestamps(stand_in, *a)
    inputs = {"video_grid_thw": torch.tensor(grids),
              "video_metadata": [VideoMetadata(total_num_frames=total, fps=fps, frames_indices=list(indices))
                                 for fps, indices, total in metadata]}
    parts = text.split("<|video_pad|>")
    out = parts[0]
    for k, part in enumerate(parts[1:]):
        out += Qwen3VLProcessor.replace_video_token(stand_in, inputs, k) + part
    return out


def hf_video_inputs(path, text: str, clips: list[list], images: list,
                    metadata: list[tuple[float, list[int], int]] | None = None) -> dict[str, torch.Tensor]:
    """HF's model inputs for ``text`` with one ``<|video_pad|>`` per clip and one ``<|image_pad|>`` per image: the
    video tensors from Anna's preprocessing (checked against transformers' processor in
    ``test_qwen35_vl_video.py``), the prompt as ``Qwen3VLProcessor`` writes it; ``metadata`` as
    :func:`hf_video_text` takes it (default: every clip's frames are source frames ``0..n-1`` at 2 fps)."""
    from anna_qwen35.video import VideoSettings, video_patches
    from transformers import AutoTokenizer, Qwen2VLImageProcessorPil

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    image_processor = Qwen2VLImageProcessorPil.from_pretrained(str(path))
    settings = VideoSettings.from_checkpoint(path, image_processor)
    patched = [video_patches(c, settings) for c in clips]
    grids = [list(g) for _, g in patched]
    metadata = metadata or [(2.0, range(len(c)), len(c)) for c in clips]
    text = hf_video_text(text, grids, metadata)
    out: dict[str, torch.Tensor] = {}
    if images:
        pix = image_processor(images=images, return_tensors="pt")
        merged = text.split("<|image_pad|>")
        text = merged[0]
        for grid, part in zip(pix["image_grid_thw"], merged[1:]):
            text += "<|image_pad|>" * int(grid.prod() // 4) + part
        out.update(pixel_values=pix["pixel_values"], image_grid_thw=pix["image_grid_thw"])
    ids = torch.tensor([tokenizer.encode(text)])
    image_id, video_id = tokenizer.convert_tokens_to_ids(["<|image_pad|>", "<|video_pad|>"])
    types_ = (ids == image_id).int() + 2 * (ids == video_id).int()
    out.update(input_ids=ids, attention_mask=torch.ones_like(ids), mm_token_type_ids=types_,
               pixel_values_videos=torch.cat([p for p, _ in patched]), video_grid_thw=torch.tensor(grids))
    return out


def hf_logits_video(model, inputs: dict[str, torch.Tensor], generated: list[int]) -> torch.Tensor:
    """HF's float32 logits over the prompt and ``generated``: video (and image) features at the prompt's
    placeholders, positions from ``get_rope_index`` continued by its delta."""
    ids = torch.cat([inputs["input_ids"], torch.tensor([generated], dtype=torch.int64)], dim=1)
    m, P = model.model, inputs["input_ids"].shape[1]
    types_ = inputs["mm_token_type_ids"]
    pos, delta = m.get_rope_index(inputs["input_ids"], types_, inputs.get("image_grid_thw"), inputs["video_grid_thw"])
    tail = (torch.arange(P, P + len(generated)) + delta[0, 0]).view(1, 1, -1).expand(3, 1, -1)
    with torch.no_grad():
        embeds = model.get_input_embeddings()(ids)
        for kind, pixels, grid in ((2, "pixel_values_videos", "video_grid_thw"), (1, "pixel_values", "image_grid_thw")):
            if pixels not in inputs:
                continue
            features = torch.cat(m.get_image_features(inputs[pixels], inputs[grid]).pooler_output)
            mask = torch.zeros(ids.shape, dtype=torch.bool)
            mask[:, :P] = types_ == kind
            embeds[mask] = features.to(embeds.dtype)
        out = model(inputs_embeds=embeds, attention_mask=torch.ones_like(ids),
                    position_ids=torch.cat([pos, tail], dim=2), use_cache=False)
    return out.logits[0].float()
