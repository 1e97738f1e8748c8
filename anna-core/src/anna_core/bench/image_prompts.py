"""``anna bench --image PATH [--image-size WxH]``: benchmark prompts that carry one image each.

A request is the chat template's rendering of one user turn — the image, then :data:`QUESTION` — with the
generation prompt, prepared by the model's processor (placeholders expanded, patches, positions), so TTFT covers
what an image chat costs in the engine: encoding the image (the vision tower), splicing its rows in and the
prefill. The image is the file at ``PATH`` (resized to ``WxH`` when given too) or, without a path, a random
``WxH`` image (default 1024x1024) drawn afresh for every run and request (seeded), so no run reuses another's
encoder output. Fetching and decoding a URL is not timed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import attrs

from anna_core.errors import AnnaError

QUESTION = "Describe this image."
DEFAULT_IMAGE_SIZE = (1024, 1024)
MAX_IMAGE_PIXELS = 1 << 28
"""Pixels: the largest image the benchmark loads or draws (a guard against typos, e.g. 100000x100000)."""


def parse_image_size(text: str, flag: str = "--image-size") -> tuple[int, int]:
    """``"1024x768"`` -> ``(1024, 768)`` (width, height); ``flag`` names the option in errors.

    Raises:
        AnnaError: not ``WxH`` with positive integers, or over :data:`MAX_IMAGE_PIXELS` pixels.
    """
    match = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", text or "")
    if not match or int(match[1]) < 1 or int(match[2]) < 1:
        raise AnnaError(f"{flag} must be WIDTHxHEIGHT (e.g. 1024x1024), got {text!r}")
    size = int(match[1]), int(match[2])
    if size[0] * size[1] > MAX_IMAGE_PIXELS:
        raise AnnaError(f"{flag} {text} is over {MAX_IMAGE_PIXELS} pixels")
    return size


@attrs.frozen
class ImageSpec:
    """The image of every benchmark request.

    Attributes:
        path: an image file (PNG, JPEG, WebP, GIF, BMP), or None for random pixels.
        size: ``(width, height)``: the random image's size, or the size the file is resized to (None: as it is).
    """

    path: Path | None = None
    size: tuple[int, int] | None = None

    def image(self, seed: int) -> Any:
        """The RGB PIL image for one request (random pixels seeded by ``seed`` without a path).

        Raises:
            AnnaError: an unreadable or undecodable file.
        """
        import numpy as np
        from PIL import Image

        if self.path is None:
            width, height = self.size or DEFAULT_IMAGE_SIZE
            pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
            return Image.fromarray(pixels)
        from anna_core.errors import InvalidRequestError
        from anna_core.media import decode_image

        try:
            image = decode_image(Path(self.path).read_bytes(), MAX_IMAGE_PIXELS)
        except (OSError, InvalidRequestError) as exc:
            raise AnnaError(f"--image {self.path}: {exc}") from exc
        return image if self.size is None else image.resize(self.size, Image.Resampling.BICUBIC)

    def describe(self) -> str:
        """``"random 1024x1024"`` or the path (and the size it is resized to)."""
        if self.path is None:
            return "random {}x{}".format(*(self.size or DEFAULT_IMAGE_SIZE))
        return str(self.path) + ("" if self.size is None else " resized to {}x{}".format(*self.size))


def image_requests(loaded: Any, spec: ImageSpec, batch: int, seed: int) -> tuple[list[list[int]], list[Any]]:
    """``batch`` prompts with one image each and their :class:`~anna_core.multimodal.MultiModalInputs`.

    Raises:
        AnnaError: the model takes no images, or has no tokenizer or chat template to write its placeholder.
    """
    ids = chat_prompt_ids(loaded, "image", QUESTION)
    prompts, inputs = [], []
    for i in range(batch):
        expanded, mm = loaded.processor.process(ids, {"image": [spec.image(seed * 1000 + i)]})
        prompts.append(expanded)
        inputs.append(mm)
    return prompts, inputs


def chat_prompt_ids(loaded: Any, kind: str, question: str) -> list[int]:
    """The ids of one user turn holding one ``kind`` (``"image"``, ``"video"``) part and then ``question``, with
    the generation prompt, rendered by the checkpoint's chat template (one placeholder, not expanded yet).

    Raises:
        AnnaError: the model's processor takes no ``kind``, or the model has no tokenizer / chat template.
    """
    processor = loaded.processor
    if processor is None or kind not in processor.modalities:
        raise AnnaError(f"--{kind}: this model takes no {kind}s (a vision-language checkpoint with its processor "
                        "config is needed)")
    if loaded.tokenizer is None:
        raise AnnaError(f"--{kind} needs the checkpoint's tokenizer and chat template (not --load-format dummy "
                        "of a config-only folder)")
    messages = [{"role": "user", "content": [{"type": kind}, {"type": "text", "text": question}]}]
    text = loaded.tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    return loaded.tokenizer.encode(text, add_special_tokens=False)
