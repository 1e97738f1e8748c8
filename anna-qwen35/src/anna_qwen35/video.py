"""Qwen3.5 video preprocessing: sampled frames -> ``pixel_values_videos`` and ``video_grid_thw``, done by Anna.

transformers' ``Qwen3VLVideoProcessor`` needs torchvision, which cannot be installed beside the CPU torch build,
so Anna computes the same tensors itself from frames already sampled (``anna_core.media.decode_video``, or a list
of PIL frames):

1. one output size for the whole clip, from its frame count and the pixel bounds (:func:`video_frame_size`: the
   sides rounded to multiples of ``patch * merge``; the clip's ``t' * h * w`` pixels, ``t'`` the frame count
   rounded to a multiple of the temporal patch, kept inside ``[min_pixels, max_pixels]``);
2. every frame resized to it (PIL, the configured resampling; transformers resizes with torchvision, whose
   antialiased resize follows PIL's within a grey level), rescaled and normalised;
3. the frames padded to a multiple of the temporal patch ``tp`` by repeating the last one, and cut into
   ``tp x p x p`` patches in spatial-merge-block order: ``[t * h * w, C * tp * p * p]`` float32, grid
   ``(t, h, w)``.

Each temporal patch (``tp`` consecutive frames) is one *frame group*; its timestamp is the mean of its first and
last frame's times (:func:`group_timestamps`), written before the group in the prompt.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import torch
from anna_core.errors import InvalidRequestError, ModelLoadError

VIDEO_PREPROCESSOR_CONFIG = "video_preprocessor_config.json"
DEFAULT_FPS = 2.0
DEFAULT_MAX_FRAMES = 768
MAX_ASPECT_RATIO = 200


@attrs.frozen
class VideoSettings:
    """The checkpoint's video preprocessing settings (``video_preprocessor_config.json``, else its image
    processor's, as transformers falls back to ``preprocessor_config.json``).

    Attributes:
        patch_size, temporal_patch_size, merge_size: the tower's patch geometry.
        min_pixels, max_pixels: pixels, bounds on a whole clip's ``t' * h * w`` (``size.shortest_edge`` /
            ``size.longest_edge``).
        fps: frames per second sampled from an encoded video (and the rate a bare frame list is taken at).
        max_frames: frames, the most one video may have.
        rescale_factor: multiplies the 0..255 pixel values.
        image_mean, image_std: per-channel normalisation after rescaling.
        resample: the PIL resampling filter (``PIL.Image.Resampling`` value; 3 = bicubic).
    """

    patch_size: int
    temporal_patch_size: int
    merge_size: int
    min_pixels: int
    max_pixels: int
    fps: float = DEFAULT_FPS
    max_frames: int = DEFAULT_MAX_FRAMES
    rescale_factor: float = 1 / 255
    image_mean: tuple[float, ...] = attrs.field(default=(0.5, 0.5, 0.5), converter=tuple)
    image_std: tuple[float, ...] = attrs.field(default=(0.5, 0.5, 0.5), converter=tuple)
    resample: int = 3

    @property
    def factor(self) -> int:
        """Pixels per merged patch side: the sides of a resized frame are multiples of it."""
        return self.patch_size * self.merge_size

    @classmethod
    def from_checkpoint(cls, root: Path, image_processor: Any) -> VideoSettings:
        """The settings of the checkpoint in ``root``: its ``video_preprocessor_config.json`` where present, each
        missing key taken from ``image_processor`` (the checkpoint's image processor), ``fps`` 2 and
        ``max_frames`` 768 by default.

        Raises:
            ModelLoadError: an unreadable video config, or one with invalid or inconsistent values.
        """
        path = Path(root) / VIDEO_PREPROCESSOR_CONFIG
        raw: dict[str, Any] = {}
        if path.is_file():
            try:
                raw = json.loads(path.read_text())
            except (OSError, ValueError) as exc:
                raise ModelLoadError(f"cannot read {str(path)!r}: {exc}") from exc
            if not isinstance(raw, dict):
                raise ModelLoadError(f"{str(path)!r} is not a JSON object")
        size = raw.get("size") or dict(image_processor.size)
        try:
            settings = cls(
                patch_size=int(raw.get("patch_size", image_processor.patch_size)),
                temporal_patch_size=int(raw.get("temporal_patch_size", image_processor.temporal_patch_size)),
                merge_size=int(raw.get("merge_size", image_processor.merge_size)),
                min_pixels=int(size["shortest_edge"]), max_pixels=int(size["longest_edge"]),
                fps=float(raw.get("fps") or DEFAULT_FPS), max_frames=int(raw.get("max_frames") or DEFAULT_MAX_FRAMES),
                rescale_factor=float(raw.get("rescale_factor", image_processor.rescale_factor)),
                image_mean=[float(x) for x in raw.get("image_mean", image_processor.image_mean)],
                image_std=[float(x) for x in raw.get("image_std", image_processor.image_std)],
                resample=int(raw.get("resample", 3)))
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelLoadError(f"invalid video preprocessing settings in {str(root)!r}: {exc!r}") from exc
        if min(settings.patch_size, settings.temporal_patch_size, settings.merge_size, settings.min_pixels,
               settings.max_frames) < 1 or settings.min_pixels > settings.max_pixels or settings.fps <= 0:
            raise ModelLoadError(f"invalid video preprocessing settings in {str(root)!r}: {settings}")
        return settings


def video_frame_size(num_frames: int, height: int, width: int, settings: VideoSettings) -> tuple[int, int]:
    """``(height, width)`` every frame of a ``num_frames``-frame clip of ``height x width`` frames is resized to.

    The sides become multiples of ``settings.factor`` (nearest; a side under it first scales the frame up).
    When the clip's ``round(num_frames / tp) * tp * h * w`` leaves ``[min_pixels, max_pixels]`` both sides are
    scaled by one factor (rounded down over the cap, up under the floor) so that the source's
    ``num_frames * height * width`` fits the bound.

    Raises:
        InvalidRequestError: an aspect ratio over 200, or fewer frames than one temporal patch.
    """
    factor, tp = settings.factor, settings.temporal_patch_size
    if num_frames < tp:
        raise InvalidRequestError(f"a video needs at least {tp} frames here, got {num_frames}", param="messages")
    if height < factor or width < factor:
        grow = max(factor / height, factor / width)
        height, width = int(height * grow), int(width * grow)
    if max(height, width) / min(height, width) > MAX_ASPECT_RATIO:
        raise InvalidRequestError(f"video frames of {width}x{height} have an aspect ratio over {MAX_ASPECT_RATIO}",
                                  param="messages")
    h, w = round(height / factor) * factor, round(width / factor) * factor
    clip = round(num_frames / tp) * tp * h * w
    if clip > settings.max_pixels:
        shrink = math.sqrt(num_frames * height * width / settings.max_pixels)
        h = max(factor, math.floor(height / shrink / factor) * factor)
        w = max(factor, math.floor(width / shrink / factor) * factor)
    elif clip < settings.min_pixels:
        grow = math.sqrt(settings.min_pixels / (num_frames * height * width))
        h, w = math.ceil(height * grow / factor) * factor, math.ceil(width * grow / factor) * factor
    return h, w


def video_patches(frames: Sequence[Any], settings: VideoSettings) -> tuple[torch.Tensor, tuple[int, int, int]]:
    """A clip's patches as transformers' Qwen3-VL video processor lays them out.

    Args:
        frames: PIL images of one size, in time order (a single frame is repeated to one temporal patch).

    Returns:
        ``(pixel_values, (t, h, w))``: ``[t * h * w, C * tp * p * p]`` float32 in spatial-merge-block order, with
        ``t = ceil(len(frames) / tp)`` and ``h, w`` in patches.

    Raises:
        InvalidRequestError: no frames, frames of different sizes, or a size :func:`video_frame_size` refuses.
    """
    from PIL import Image

    if not frames:
        raise InvalidRequestError("a video without frames", param="messages")
    frames = [f if f.mode == "RGB" else f.convert("RGB") for f in frames]
    sizes = {f.size for f in frames}
    if len(sizes) > 1:
        raise InvalidRequestError(f"the frames of one video must share one size, got {sorted(sizes)}",
                                  param="messages")
    tp, p, m = settings.temporal_patch_size, settings.patch_size, settings.merge_size
    if len(frames) < tp:  # too short for one temporal patch: the frames the padding would add anyway
        frames = frames + [frames[-1]] * (tp - len(frames))
    width, height = frames[0].size
    h, w = video_frame_size(len(frames), height, width, settings)
    resample = Image.Resampling(settings.resample)
    pixels = np.stack([np.asarray(f.resize((w, h), resample=resample), dtype=np.float32) for f in frames])
    mean = np.asarray(settings.image_mean, dtype=np.float32)
    std = np.asarray(settings.image_std, dtype=np.float32)
    pixels = (pixels * np.float32(settings.rescale_factor) - mean) / std  # [T, H, W, C]
    video = torch.from_numpy(np.ascontiguousarray(pixels.transpose(0, 3, 1, 2)))  # [T, C, H, W]
    if pad := -video.shape[0] % tp:
        video = torch.cat([video, video[-1:].expand(pad, -1, -1, -1)])
    gt, gh, gw = video.shape[0] // tp, h // p, w // p
    channels = video.shape[1]
    # [gt, tp, C, gh/m, m, p, gw/m, m, p] -> [gt, gh/m, gw/m, m, m, C, tp, p, p]: merge blocks, then each patch
    patches = video.reshape(gt, tp, channels, gh // m, m, p, gw // m, m, p).permute(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return patches.reshape(gt * gh * gw, channels * tp * p * p).contiguous(), (gt, gh, gw)


def group_timestamps(times_s: Sequence[float], temporal_patch_size: int) -> list[float]:
    """Seconds, one per frame group: the mean of the group's first and last frame time (the last frame's time
    repeated to fill the final group, as its pixels are)."""
    times = list(times_s)
    if pad := -len(times) % temporal_patch_size:
        times += [times[-1]] * pad
    return [(times[i] + times[i + temporal_patch_size - 1]) / 2 for i in range(0, len(times), temporal_patch_size)]


def timestamp_text(seconds: float) -> str:
    """The text Qwen3.5 prompts write before a frame group: ``"<1.5 seconds>"`` (one decimal)."""
    return f"<{seconds:.1f} seconds>"
