"""Small encoded videos for tests and benchmarks, written with PyAV (MPEG-4 part 2 in an MP4 container, near
lossless), so the decoding path (:func:`anna_core.media.decode_video`) reads real files."""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np


def encode_mp4(frames: Sequence[np.ndarray], rate: int) -> bytes:
    """An MP4 of ``frames`` shown at ``rate`` frames per second.

    Args:
        frames: ``[H, W, 3]`` uint8 RGB arrays, one size (width and height even, as yuv420p wants).
        rate: frames per second (positive).

    Returns:
        The file's bytes.

    Raises:
        ValueError: no frames, frames of different shapes or not ``[H, W, 3]`` uint8, a non-positive rate.
    """
    import av

    if not frames:
        raise ValueError("encode_mp4 needs at least one frame")
    shape = frames[0].shape
    if len(shape) != 3 or shape[2] != 3 or any(f.shape != shape or f.dtype != np.uint8 for f in frames):
        raise ValueError(f"frames must be [H, W, 3] uint8 of one shape, the first is {shape}")
    if rate <= 0:
        raise ValueError(f"rate must be positive, got {rate}")
    buf = io.BytesIO()
    with av.open(buf, mode="w", format="mp4") as out:
        stream = out.add_stream("mpeg4", rate=rate)
        stream.width, stream.height, stream.pix_fmt = shape[1], shape[0], "yuv420p"
        stream.options = {"qscale": "1"}
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return buf.getvalue()


def random_mp4(num_frames: int, rate: int, seed: int, size: tuple[int, int] = (48, 32)) -> bytes:
    """An MP4 of ``num_frames`` seeded random frames of ``size`` (width, height) at ``rate`` fps."""
    rng = np.random.RandomState(seed)
    return encode_mp4([rng.randint(0, 256, (size[1], size[0], 3), dtype=np.uint8) for _ in range(num_frames)], rate)
