"""Shared helpers of the Qwen3.5 vision-language tests: a tiny random checkpoint that takes images, small random
images, and HF transformers' side of each comparison (the processor inputs built as HF's ``Qwen3VLProcessor``
builds them: one ``<|image_pad|>`` per image replaced by ``grid.prod() / merge^2`` copies)."""

from __future__ import annotations

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


def hf_greedy_vl(model, inputs: dict[str, torch.Tensor], n: int) -> list[int]:
    """``n`` greedy tokens of HF ``generate`` (EOS disabled)."""
    from transformers import GenerationConfig

    gen = GenerationConfig(do_sample=False, max_new_tokens=n, min_new_tokens=n, eos_token_id=None, pad_token_id=0)
    saved, model.generation_config.eos_token_id = model.generation_config.eos_token_id, None
    try:
        with torch.no_grad():
            out = model.generate(**inputs, generation_config=gen)
    finally:
        model.generation_config.eos_token_id = saved
    return out[0, inputs["input_ids"].shape[1]:].tolist()


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
