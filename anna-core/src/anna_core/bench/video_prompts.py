"""Benchmark prompts that carry one video each: a chat turn with a video part and :data:`QUESTION`.

The video is an MP4 of ``frames`` random frames of ``size`` at ``rate`` frames per second, encoded once per
request (seeded, so no two requests share an encoder output), decoded as the server decodes a ``video_url``
(:func:`anna_core.media.decode_video_for`: the checkpoint's sampling rate and frame cap, the default media
policy's caps) and prepared by the model's processor. Encoding and decoding the file are not timed; TTFT covers
encoding the frames (the vision tower), splicing them in and the prefill.
"""

from __future__ import annotations

from typing import Any

import attrs

from anna_core.bench.image_prompts import chat_prompt_ids
from anna_core.errors import AnnaError

QUESTION = "Describe this video."


@attrs.frozen
class VideoSpec:
    """The video of every benchmark request.

    Attributes:
        frames: frames in the file (all kept when ``rate`` is at most the checkpoint's sampling rate).
        size: ``(width, height)`` of every frame (even sides).
        rate: frames per second of the file (an integer).

    Raises:
        AnnaError: a non-positive value or an odd side.
    """

    frames: int = 8
    size: tuple[int, int] = (640, 480)
    rate: int = 2

    def __attrs_post_init__(self) -> None:
        if self.frames < 1 or self.rate <= 0 or min(self.size) < 2 or self.size[0] % 2 or self.size[1] % 2:
            raise AnnaError(f"a benchmark video needs frames >= 1, a positive rate and even sides, got {self}")

    def encoded(self, seed: int) -> bytes:
        """The MP4 file of one request (random pixels seeded by ``seed``)."""
        from anna_core.testing.video import random_mp4

        return random_mp4(self.frames, self.rate, seed, self.size)

    def describe(self) -> str:
        return "random {} frames of {}x{} at {} fps".format(self.frames, *self.size, self.rate)


def video_requests(loaded: Any, spec: VideoSpec, batch: int, seed: int) -> tuple[list[list[int]], list[Any]]:
    """``batch`` prompts with one video each and their :class:`~anna_core.multimodal.MultiModalInputs`.

    Raises:
        AnnaError: the model takes no videos, has no tokenizer or chat template, or the video does not decode
            to ``spec.frames`` frames at the checkpoint's sampling (its rate below ``spec.rate``, or its frame cap).
    """
    from anna_core.media import MediaPolicy, decode_video_for

    ids = chat_prompt_ids(loaded, "video", QUESTION)
    prompts, inputs = [], []
    for i in range(batch):
        video = decode_video_for(spec.encoded(seed * 1000 + i), loaded.processor.video_sampling, MediaPolicy())
        if len(video.frames) != spec.frames:
            raise AnnaError(f"the benchmark video decodes to {len(video.frames)} frames at the checkpoint's sampling "
                            f"{loaded.processor.video_sampling[:2]} (fps, max frames), not {spec.frames}")
        expanded, mm = loaded.processor.process(ids, {"video": [video]})
        prompts.append(expanded)
        inputs.append(mm)
    return prompts, inputs
