"""Qwen3.5 vision-language request preparation: images -> patches, placeholders and M-RoPE positions.

A prompt marks each image with one ``<|image_pad|>`` token (the chat template writes
``<|vision_start|><|image_pad|><|vision_end|>`` per image part). :meth:`Qwen35VLProcessor.process`

* runs the checkpoint's own image processor (transformers' PIL-based ``Qwen2VLImageProcessorPil`` with the
  checkpoint's ``preprocessor_config.json``: resize to the pixel bounds, rescale, normalise, patchify in
  spatial-merge-block order) on the images;
* expands the ``k``-th ``<|image_pad|>`` to ``t * h * w / merge^2`` copies (the rows the tower gives for the
  ``k``-th image) and makes each run one :class:`~anna_core.multimodal.MediaItem` (its ``content_hash`` is
  :func:`~anna_core.multimodal.media_hash` of the patches and the grid, so equal pixels share encoder output and
  prefix-cache blocks whatever the source bytes);
* computes the interleaved M-RoPE positions as transformers' ``Qwen3_5Model.get_rope_index`` does: text counts
  up in all three rows; an image of merged grid ``(t, h', w')`` starting at position ``s`` gives its rows
  ``(s + t_i, s + h_i, s + w_i)``, and the text after it continues at ``s + max(h', w')``. Generated tokens
  continue at ``index + position_delta`` with ``position_delta = max(positions) + 1 - len(prompt)``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from anna_core.errors import InvalidRequestError, ModelLoadError
from anna_core.multimodal import MediaItem, MultiModalInputs, media_hash

from anna_qwen35.vision import VisionConfig

log = logging.getLogger("anna.qwen35")

PREPROCESSOR_CONFIG = "preprocessor_config.json"
IMAGE_TOKEN = "<|image_pad|>"


class Qwen35VLProcessor:
    """Implements :class:`anna_core.multimodal.MediaProcessor` for Qwen3.5 vision-language checkpoints (images).

    Args:
        image_processor: a transformers image processor returning ``pixel_values`` ``[sum N, C*tp*p*p]`` and
            ``image_grid_thw`` ``[n, 3]`` for a list of PIL images (``Qwen2VLImageProcessorPil``).
        image_token_id: the ``<|image_pad|>`` id (``config.json`` ``image_token_id``).
        spatial_merge_size: the tower's merge size ``m`` (``m * m`` patches per placeholder token).
    """

    modalities = ("image",)

    def __init__(self, image_processor: Any, *, image_token_id: int, spatial_merge_size: int):
        self.image_processor = image_processor
        self.image_token_id = image_token_id
        self.merge = spatial_merge_size

    @classmethod
    def from_checkpoint(cls, root: Path, config: dict[str, Any], vision: VisionConfig) -> Qwen35VLProcessor | None:
        """The processor of the checkpoint in ``root`` (its ``preprocessor_config.json``), or None when the folder
        has none (the model then serves text only; the caller logs it).

        Raises:
            ModelLoadError: an unreadable preprocessor config, one whose patch, temporal-patch or merge size
                differs from the tower's, or a ``config.json`` without ``image_token_id``.
        """
        path = Path(root) / PREPROCESSOR_CONFIG
        if not path.is_file():
            return None
        try:
            json.loads(path.read_text())  # a clear error for a broken file, before transformers reads it
            image_processor = pil_image_processor_class().from_pretrained(str(root), local_files_only=True)
        except (OSError, ValueError, TypeError) as exc:
            raise ModelLoadError(f"cannot read {str(path)!r}: {exc}") from exc
        want = {"patch_size": vision.patch_size, "temporal_patch_size": vision.temporal_patch_size,
                "merge_size": vision.spatial_merge_size}
        got = {k: getattr(image_processor, k) for k in want}
        if got != want:
            raise ModelLoadError(f"{PREPROCESSOR_CONFIG} has {got} but the vision tower has {want}")
        if "image_token_id" not in config:
            raise ModelLoadError("config.json of a vision-language Qwen3.5 checkpoint lacks image_token_id")
        return cls(image_processor, image_token_id=int(config["image_token_id"]),
                   spatial_merge_size=vision.spatial_merge_size)

    def process(self, prompt_token_ids: Sequence[int], media: Mapping[str, Sequence[Any]],
                options: Mapping[str, Any] | None = None) -> tuple[list[int], MultiModalInputs]:
        """The prompt with each image's placeholder expanded, and its :class:`MultiModalInputs`.

        Args:
            prompt_token_ids: ``P0`` ids with one ``<|image_pad|>`` per image, in the images' order.
            media: ``{"image": [PIL images]}`` (RGB or convertible).
            options: ``{"min_pixels": int, "max_pixels": int}`` (either or none): the pixel bounds each image is
                resized into, instead of the preprocessor config's.

        Returns:
            ``(ids, inputs)``: ``P`` ids (``P0`` plus each image's extra placeholders) and the images as
            ``MediaItem`` s (``data``: ``{"pixel_values": [N, C*tp*p*p] float32, "grid_thw": (t, h, w)}``) with the
            ``[3, P]`` positions and the delta.

        Raises:
            InvalidRequestError: a modality other than images, placeholders that do not match the images in
                number, an unknown or invalid option, or an image the processor refuses (e.g. an aspect ratio over
                200).
        """
        unknown = sorted(set(media) - set(self.modalities))
        if unknown:
            raise InvalidRequestError(f"this model takes images, not {', '.join(unknown)}", param="messages")
        images = list(media.get("image", ()))
        ids = list(prompt_token_ids)
        slots = [i for i, t in enumerate(ids) if t == self.image_token_id]
        if len(slots) != len(images):
            raise InvalidRequestError(f"the prompt has {len(slots)} image placeholders ({IMAGE_TOKEN}) for "
                                      f"{len(images)} images", param="messages")
        size = self._size(options or {})
        if not images:
            return ids, MultiModalInputs()
        try:
            out = self.image_processor(images=images, size=size, return_tensors="pt")
        except (ValueError, TypeError, OSError) as exc:
            raise InvalidRequestError(f"cannot preprocess an image: {exc}", param="messages") from exc
        grids = [tuple(int(x) for x in g) for g in out["image_grid_thw"].tolist()]
        pixels = torch.split(out["pixel_values"].to(torch.float32), [t * h * w for t, h, w in grids])
        return self._expand(ids, slots, list(zip(pixels, grids)))

    def _size(self, options: Mapping[str, Any]) -> dict[str, int]:
        """The image processor's ``size`` (``shortest_edge`` / ``longest_edge``: pixel bounds) for ``options``."""
        unknown = sorted(set(options) - {"min_pixels", "max_pixels"})
        if unknown:
            raise InvalidRequestError(f"mm_processor_kwargs {unknown} are not supported (only min_pixels, max_pixels)",
                                      param="mm_processor_kwargs")
        size = dict(self.image_processor.size)
        bounds = {"min_pixels": size["shortest_edge"], "max_pixels": size["longest_edge"]}
        for key, value in options.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidRequestError(f"mm_processor_kwargs.{key} must be a positive integer, got {value!r}",
                                          param="mm_processor_kwargs")
            bounds[key] = value
        if bounds["min_pixels"] > bounds["max_pixels"]:
            raise InvalidRequestError(f"mm_processor_kwargs: min_pixels {bounds['min_pixels']} exceeds max_pixels "
                                      f"{bounds['max_pixels']}", param="mm_processor_kwargs")
        return {"shortest_edge": bounds["min_pixels"], "longest_edge": bounds["max_pixels"]}

    def _expand(self, ids: list[int], slots: list[int], images: list[tuple[torch.Tensor, tuple[int, int, int]]]
                ) -> tuple[list[int], MultiModalInputs]:
        out_ids: list[int] = []
        rows: list[list[int]] = [[], [], []]
        items = []
        nxt, prev = 0, 0  # next text position; end of the previous slot in ``ids``
        for slot, (pixel_values, grid) in zip(slots, images):
            nxt = _text(rows, out_ids, ids[prev:slot], nxt)
            t, h, w = grid[0], grid[1] // self.merge, grid[2] // self.merge
            length = t * h * w
            items.append(MediaItem("image", len(out_ids), length, media_hash(pixel_values, *grid),
                                   {"pixel_values": pixel_values, "grid_thw": grid}))
            out_ids += [self.image_token_id] * length
            ti = torch.arange(t).repeat_interleave(h * w)
            hi = torch.arange(h).repeat_interleave(w).repeat(t)
            wi = torch.arange(w).repeat(t * h)
            for r, idx in zip(rows, (ti, hi, wi)):
                r.extend((idx + nxt).tolist())
            nxt += max(h, w)
            prev = slot + 1
        _text(rows, out_ids, ids[prev:], nxt)
        delta = max(max(r) for r in rows) + 1 - len(out_ids)
        return out_ids, MultiModalInputs(items, rows, delta)


def pil_image_processor_class() -> type:
    """transformers' PIL-based Qwen2-VL image processor: ``Qwen2VLImageProcessorPil`` (transformers 5 with image
    processor backends), else ``Qwen2VLImageProcessor`` (earlier releases, where that name is the PIL/numpy one and
    the torchvision one is ``...Fast``)."""
    import transformers

    return getattr(transformers, "Qwen2VLImageProcessorPil", None) or transformers.Qwen2VLImageProcessor


def _text(rows: list[list[int]], out_ids: list[int], text: list[int], start: int) -> int:
    """Append text tokens at positions ``start, start+1, ...`` in every row; returns the next position."""
    out_ids += text
    for r in rows:
        r.extend(range(start, start + len(text)))
    return start + len(text)
