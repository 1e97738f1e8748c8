"""Qwen3.5 vision-language request preparation: images and videos -> patches, placeholders and M-RoPE positions.

A prompt marks each image with one ``<|image_pad|>`` token and each video with one ``<|video_pad|>`` (the chat
template writes ``<|vision_start|><|image_pad|><|vision_end|>`` per image part, the same with ``<|video_pad|>``
per video part). :meth:`Qwen35VLProcessor.process`

* runs the checkpoint's own image processor (transformers' PIL-based ``Qwen2VLImageProcessorPil`` with the
  checkpoint's ``preprocessor_config.json``: resize to the pixel bounds, rescale, normalise, patchify in
  spatial-merge-block order) on the images, and Anna's :mod:`anna_qwen35.video` on each video's frames;
* expands the ``k``-th ``<|image_pad|>`` to ``t * h * w / merge^2`` copies (the rows the tower gives for the
  ``k``-th image) and makes each run one :class:`~anna_core.multimodal.MediaItem` (its ``content_hash`` is
  :func:`~anna_core.multimodal.media_hash` of the patches and the grid, so equal pixels share encoder output and
  prefix-cache blocks whatever the source bytes);
* replaces the ``k``-th ``<|video_pad|>`` by the video's frame groups, each as transformers' ``Qwen3VLProcessor``
  writes it: ``<{t:.1f} seconds>`` (the group's time, tokenized) ``<|vision_start|>`` ``h * w / merge^2`` copies
  of ``<|video_pad|>`` ``<|vision_end|>``; each group is one ``"video"`` item of grid ``(1, h, w)`` (the tower
  attends within a frame group only, so a group encodes alone to the rows it has in the whole video);
* computes the interleaved M-RoPE positions as transformers' ``Qwen3_5Model.get_rope_index`` does: text counts
  up in all three rows; an image (or a frame group) of merged grid ``(t, h', w')`` starting at position ``s``
  gives its rows ``(s + t_i, s + h_i, s + w_i)``, and the text after it continues at ``s + max(h', w')``.
  Generated tokens continue at ``index + position_delta`` with ``position_delta = max(positions) + 1 - len(prompt)``.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import torch
from anna_core.errors import InvalidRequestError, ModelLoadError
from anna_core.media import DecodedVideo
from anna_core.multimodal import MediaItem, MultiModalInputs, media_hash

from anna_qwen35.video import (
    VIDEO_PREPROCESSOR_CONFIG,
    VideoSettings,
    group_timestamps,
    timestamp_text,
    video_patches,
)
from anna_qwen35.vision import VisionConfig

log = logging.getLogger("anna.qwen35")

PREPROCESSOR_CONFIG = "preprocessor_config.json"
IMAGE_TOKEN = "<|image_pad|>"
VIDEO_TOKEN = "<|video_pad|>"
OPTIONS = ("min_pixels", "max_pixels", "fps", "max_frames")
"""The ``mm_processor_kwargs`` keys :meth:`Qwen35VLProcessor.process` takes."""


@attrs.frozen
class VideoLayout:
    """What a processor needs to lay videos out in a prompt.

    Attributes:
        settings: the checkpoint's video preprocessing (:class:`~anna_qwen35.video.VideoSettings`).
        video_token_id, vision_start_id, vision_end_id: ``<|video_pad|>``, ``<|vision_start|>``, ``<|vision_end|>``.
        encode_text: text -> token ids without special tokens (the checkpoint's tokenizer), for the timestamps.
    """

    settings: VideoSettings
    video_token_id: int
    vision_start_id: int
    vision_end_id: int
    encode_text: Callable[[str], list[int]]


class Qwen35VLProcessor:
    """Implements :class:`anna_core.multimodal.MediaProcessor` for Qwen3.5 vision-language checkpoints (images and,
    with a :class:`VideoLayout`, videos).

    Args:
        image_processor: a transformers image processor returning ``pixel_values`` ``[sum N, C*tp*p*p]`` and
            ``image_grid_thw`` ``[n, 3]`` for a list of PIL images (``Qwen2VLImageProcessorPil``).
        image_token_id: the ``<|image_pad|>`` id (``config.json`` ``image_token_id``).
        spatial_merge_size: the tower's merge size ``m`` (``m * m`` patches per placeholder token).
        video: how videos are patched and laid out; None: images only.
    """

    def __init__(self, image_processor: Any, *, image_token_id: int, spatial_merge_size: int,
                 video: VideoLayout | None = None):
        self.image_processor = image_processor
        self.image_token_id = image_token_id
        self.merge = spatial_merge_size
        self.video = video
        self.modalities = ("image",) if video is None else ("image", "video")
        # a clip's frames are resized to at most max_pixels in all (t' * h * w), so no frame needs more than that
        self.video_sampling = None if video is None else (video.settings.fps, video.settings.max_frames,
                                                          video.settings.max_pixels)

    @classmethod
    def from_checkpoint(cls, root: Path, config: dict[str, Any], vision: VisionConfig,
                        tokenizer: Any = None) -> Qwen35VLProcessor | None:
        """The processor of the checkpoint in ``root`` (its ``preprocessor_config.json``, and for videos its
        ``video_preprocessor_config.json`` if any), or None when the folder has no preprocessor config (the model
        then serves text only; the caller logs it). Videos need ``tokenizer`` (its ``encode(text)`` writes the
        timestamps) and ``config.json``'s ``video_token_id``, ``vision_start_token_id`` and
        ``vision_end_token_id``; without them the processor takes images only.

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
                   spatial_merge_size=vision.spatial_merge_size,
                   video=_video_layout(root, config, vision, image_processor, tokenizer))

    def process(self, prompt_token_ids: Sequence[int], media: Mapping[str, Sequence[Any]],
                options: Mapping[str, Any] | None = None) -> tuple[list[int], MultiModalInputs]:
        """The prompt with each medium's placeholder expanded, and its :class:`MultiModalInputs`.

        Args:
            prompt_token_ids: ``P0`` ids with one ``<|image_pad|>`` per image and one ``<|video_pad|>`` per video,
                in the media's order.
            media: ``{"image": [PIL images], "video": [videos]}``; a video is an
                :class:`anna_core.media.DecodedVideo` (frames and their times) or a list of PIL frames (taken at
                ``fps``: frame ``k`` at ``k / fps`` seconds).
            options: ``min_pixels`` / ``max_pixels`` (ints: the pixel bounds each image is resized into, instead of
                the preprocessor config's), ``fps`` (a frame list's rate) and ``max_frames`` (the most frames a
                video may have); any subset.

        Returns:
            ``(ids, inputs)``: ``P`` ids and the media as ``MediaItem`` s (``data``:
            ``{"pixel_values": [N, C*tp*p*p] float32, "grid_thw": (t, h, w)}``) with the ``[3, P]`` positions and
            the delta. An image is one item; a video is one ``"video"`` item per frame group (``tp`` frames, grid
            ``(1, h, w)``), each written as ``<{t:.1f} seconds><|vision_start|><|video_pad|>*n<|vision_end|>`` in
            place of the video's ``<|video_pad|>``.

        Raises:
            InvalidRequestError: a modality it does not take, placeholders that do not match the media in number,
                an unknown or invalid option, an image the processor refuses (e.g. an aspect ratio over 200), a
                video over ``max_frames`` frames or with frames of different sizes.
        """
        unknown = sorted(set(media) - set(self.modalities))
        if unknown:
            raise InvalidRequestError(f"this model takes {' and '.join(self.modalities)}, not {', '.join(unknown)}",
                                      param="messages")
        images, videos = list(media.get("image", ())), list(media.get("video", ()))
        ids = list(prompt_token_ids)
        video_id = None if self.video is None else self.video.video_token_id
        image_slots = [i for i, t in enumerate(ids) if t == self.image_token_id]
        video_slots = [i for i, t in enumerate(ids) if t == video_id]
        if len(image_slots) != len(images):
            raise InvalidRequestError(f"the prompt has {len(image_slots)} image placeholders ({IMAGE_TOKEN}) for "
                                      f"{len(images)} images", param="messages")
        if len(video_slots) != len(videos):
            raise InvalidRequestError(f"the prompt has {len(video_slots)} video placeholders ({VIDEO_TOKEN}) for "
                                      f"{len(videos)} videos", param="messages")
        options = dict(options or {})
        _check_options(options)
        size = self._size(options)
        if not images and not videos:
            return ids, MultiModalInputs()
        filled: dict[int, Any] = {}
        if images:
            filled.update(zip(image_slots, self._images(images, size)))
        for slot, video in zip(video_slots, videos):
            filled[slot] = self._video(video, options)
        return self._expand(ids, filled)

    def hf_inputs(self, ids: Sequence[int], inputs: MultiModalInputs, device: Any = None) -> dict[str, torch.Tensor]:
        """The HF ``Qwen3_5ForConditionalGeneration`` inputs of a prompt :meth:`process` returned (a benchmark or
        parity check feeds HF the same pixels): ``input_ids`` / ``attention_mask`` ``[1, P]``, ``mm_token_type_ids``
        (1 at image, 2 at video placeholders) and, per modality present, ``pixel_values`` / ``image_grid_thw`` and
        ``pixel_values_videos`` / ``video_grid_thw`` (each frame group one ``(1, h, w)`` video, as HF's rope index
        splits a video per frame), on ``device`` (default: the CPU).
        """
        ids_t = torch.tensor([list(ids)], dtype=torch.int64)
        types = torch.zeros_like(ids_t, dtype=torch.int32)
        out = {"input_ids": ids_t, "attention_mask": torch.ones_like(ids_t)}
        for modality, kind, pixels, grid in (("image", 1, "pixel_values", "image_grid_thw"),
                                             ("video", 2, "pixel_values_videos", "video_grid_thw")):
            items = [m for m in inputs.items if m.modality == modality]
            for m in items:
                types[0, m.offset:m.end] = kind
            if items:
                out[pixels] = torch.cat([m.data["pixel_values"] for m in items])
                out[grid] = torch.tensor([list(m.data["grid_thw"]) for m in items], dtype=torch.int64)
        out["mm_token_type_ids"] = types
        return {k: v.to(device) for k, v in out.items()} if device is not None else out

    def _images(self, images: list[Any], size: dict[str, int]) -> list[tuple[torch.Tensor, tuple[int, int, int]]]:
        try:
            out = self.image_processor(images=images, size=size, return_tensors="pt")
        except (ValueError, TypeError, OSError) as exc:
            raise InvalidRequestError(f"cannot preprocess an image: {exc}", param="messages") from exc
        grids = [tuple(int(x) for x in g) for g in out["image_grid_thw"].tolist()]
        pixels = torch.split(out["pixel_values"].to(torch.float32), [t * h * w for t, h, w in grids])
        return list(zip(pixels, grids))

    def _video(self, video: Any, options: Mapping[str, Any]) -> list[tuple[str, torch.Tensor, tuple[int, int, int]]]:
        """``(timestamp text, pixel_values, (1, h, w))`` per frame group of one video."""
        settings = self.video.settings
        if isinstance(video, DecodedVideo):
            frames, times = list(video.frames), list(video.timestamps_s)
        elif isinstance(video, Sequence) and not isinstance(video, (str, bytes)):
            fps = options.get("fps", settings.fps)
            frames, times = list(video), [k / fps for k in range(len(video))]
        else:
            raise InvalidRequestError("a video is a DecodedVideo or a list of PIL frames", param="messages")
        max_frames = min(options.get("max_frames", settings.max_frames), settings.max_frames)
        if len(frames) > max_frames:
            raise InvalidRequestError(f"a video of {len(frames)} frames exceeds max_frames ({max_frames})",
                                      param="messages")
        pixels, (t, h, w) = video_patches(frames, settings)
        stamps = group_timestamps(times, settings.temporal_patch_size)[:t]
        return [(timestamp_text(s), chunk, (1, h, w)) for s, chunk in zip(stamps, torch.split(pixels, h * w))]

    def _size(self, options: Mapping[str, Any]) -> dict[str, int]:
        """The image processor's ``size`` (``shortest_edge`` / ``longest_edge``: pixel bounds) for ``options``."""
        size = dict(self.image_processor.size)
        bounds = {"min_pixels": size["shortest_edge"], "max_pixels": size["longest_edge"]}
        for key in bounds.keys() & options.keys():  # an image is never resized past the checkpoint's own bound
            if options[key] > size["longest_edge"]:
                raise InvalidRequestError(f"mm_processor_kwargs.{key} {options[key]} exceeds the checkpoint's "
                                          f"max_pixels ({size['longest_edge']})", param="mm_processor_kwargs")
        bounds.update({k: v for k, v in options.items() if k in bounds})
        if bounds["min_pixels"] > bounds["max_pixels"]:
            raise InvalidRequestError(f"mm_processor_kwargs: min_pixels {bounds['min_pixels']} exceeds max_pixels "
                                      f"{bounds['max_pixels']}", param="mm_processor_kwargs")
        return {"shortest_edge": bounds["min_pixels"], "longest_edge": bounds["max_pixels"]}

    def _expand(self, ids: list[int], filled: dict[int, Any]) -> tuple[list[int], MultiModalInputs]:
        """Each slot of ``filled`` (an image's ``(pixels, grid)``, or a video's frame groups) expanded in ``ids``."""
        out_ids: list[int] = []
        rows: list[list[int]] = [[], [], []]
        items: list[MediaItem] = []
        nxt, prev = 0, 0  # next text position; end of the previous slot in ``ids``
        for slot in sorted(filled):
            nxt = _text(rows, out_ids, ids[prev:slot], nxt)
            if ids[slot] == self.image_token_id:
                pixel_values, grid = filled[slot]
                nxt = self._medium(rows, out_ids, items, "image", self.image_token_id, pixel_values, grid, nxt)
            else:
                layout = self.video
                for stamp, pixel_values, grid in filled[slot]:
                    nxt = _text(rows, out_ids, [*layout.encode_text(stamp), layout.vision_start_id], nxt)
                    nxt = self._medium(rows, out_ids, items, "video", layout.video_token_id, pixel_values, grid, nxt)
                    nxt = _text(rows, out_ids, [layout.vision_end_id], nxt)
            prev = slot + 1
        _text(rows, out_ids, ids[prev:], nxt)
        delta = max(max(r) for r in rows) + 1 - len(out_ids)
        return out_ids, MultiModalInputs(items, rows, delta)

    def _medium(self, rows: list[list[int]], out_ids: list[int], items: list[MediaItem], modality: str, token: int,
                pixel_values: torch.Tensor, grid: tuple[int, int, int], start: int) -> int:
        """Append one medium's placeholders and rows ``(start + t_i, start + h_i, start + w_i)``; returns the next
        text position, ``start + max(h', w')``."""
        t, h, w = grid[0], grid[1] // self.merge, grid[2] // self.merge
        length = t * h * w
        items.append(MediaItem(modality, len(out_ids), length, media_hash(pixel_values, *grid),
                               {"pixel_values": pixel_values, "grid_thw": grid}))
        out_ids += [token] * length
        ti = torch.arange(t).repeat_interleave(h * w)
        hi = torch.arange(h).repeat_interleave(w).repeat(t)
        wi = torch.arange(w).repeat(t * h)
        for r, idx in zip(rows, (ti, hi, wi)):
            r.extend((idx + start).tolist())
        return start + max(h, w)


def _check_options(options: Mapping[str, Any]) -> None:
    """Raises InvalidRequestError: an unknown key, or a value of the wrong kind."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise InvalidRequestError(f"mm_processor_kwargs {unknown} are not supported (only {', '.join(OPTIONS)})",
                                  param="mm_processor_kwargs")
    for key, value in options.items():
        number = (int, float) if key == "fps" else (int,)
        if isinstance(value, bool) or not isinstance(value, number) or not math.isfinite(value) or value <= 0:
            kind = "a positive number" if key == "fps" else "a positive integer"
            raise InvalidRequestError(f"mm_processor_kwargs.{key} must be {kind}, got {value!r}",
                                      param="mm_processor_kwargs")


def _video_layout(root: Path, config: dict[str, Any], vision: VisionConfig, image_processor: Any,
                  tokenizer: Any) -> VideoLayout | None:
    """The video layout of a checkpoint, or None (logged) when it lacks a tokenizer or the video token ids."""
    keys = ("video_token_id", "vision_start_token_id", "vision_end_token_id")
    missing = [k for k in keys if k not in config]
    if tokenizer is None or missing:
        log.info("%s: Qwen3.5 takes images only here (%s)", root,
                 "no tokenizer" if tokenizer is None else f"config.json lacks {missing}")
        return None
    settings = VideoSettings.from_checkpoint(root, image_processor)
    if (settings.patch_size, settings.temporal_patch_size, settings.merge_size) != (
            vision.patch_size, vision.temporal_patch_size, vision.spatial_merge_size):
        raise ModelLoadError(f"{VIDEO_PREPROCESSOR_CONFIG} patch sizes differ from the vision tower's")
    return VideoLayout(settings, int(config["video_token_id"]), int(config["vision_start_token_id"]),
                       int(config["vision_end_token_id"]), lambda text: tokenizer.encode(text, add_special_tokens=False))


def pil_image_processor_class() -> type:
    """transformers' PIL-based Qwen2-VL image processor: ``Qwen2VLImageProcessorPil`` (transformers 5 with image
    processor backends), else ``Qwen2VLImageProcessor`` (earlier releases, where that name is the PIL/numpy one and
    the torchvision one is ``...Fast``)."""
    import transformers

    try:  # a release that lists the name but cannot import it raises here, not AttributeError alone
        return transformers.Qwen2VLImageProcessorPil
    except (AttributeError, ImportError):
        return transformers.Qwen2VLImageProcessor


def _text(rows: list[list[int]], out_ids: list[int], text: list[int], start: int) -> int:
    """Append text tokens at positions ``start, start+1, ...`` in every row; returns the next position."""
    out_ids += text
    for r in rows:
        r.extend(range(start, start + len(text)))
    return start + len(text)
