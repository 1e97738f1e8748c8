"""Benchmark prompts that carry one video each: a chat turn with a video part and :data:`QUESTION`.

The video is ``frames`` random RGB frames of ``size``, taken ``rate`` frames per second, drawn afresh for every
request (seeded, so no two requests share an encoder output) and handed to the model's processor as a frame list
(``mm_processor_kwargs`` ``fps`` = ``rate``: frame ``k`` at ``k / rate`` seconds), as a decoded video of that rate
would be; no file is encoded or decoded (that work is not timed by a server's TTFT either, and the benchmark then
needs no video codec on the GPU machine). TTFT covers encoding the frames (the vision tower), splicing them in and
the prefill.
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
        frames: frames of the video.
        size: ``(width, height)`` of every frame.
        rate: frames per second (positive).

    Raises:
        AnnaError: a non-positive value.
    """

    frames: int = 8
    size: tuple[int, int] = (640, 480)
    rate: float = 2.0

    def __attrs_post_init__(self) -> None:
        if self.frames < 1 or self.rate <= 0 or min(self.size) < 1:
            raise AnnaError(f"a benchmark video needs at least one frame, a positive rate and size, got {self}")

    def video(self, seed: int) -> list[Any]:
        """The RGB PIL frames of one request (random pixels seeded by ``seed``)."""
        import numpy as np
        from PIL import Image

        rng = np.random.RandomState(seed % (1 << 32))
        width, height = self.size
        return [Image.fromarray(rng.randint(0, 256, (height, width, 3), dtype=np.uint8)) for _ in range(self.frames)]

    def describe(self) -> str:
        return "random {} frames of {}x{} at {:g} fps".format(self.frames, *self.size, self.rate)


def video_requests(loaded: Any, spec: VideoSpec, batch: int, seed: int) -> tuple[list[list[int]], list[Any]]:
    """``batch`` prompts with one video each and their :class:`~anna_core.multimodal.MultiModalInputs`.

    Raises:
        AnnaError: the model takes no videos, or has no tokenizer or chat template; InvalidRequestError (an
            AnnaError) from the processor, e.g. more frames than the checkpoint's ``max_frames``.
    """
    ids = chat_prompt_ids(loaded, "video", QUESTION)
    prompts, inputs = [], []
    for i in range(batch):
        expanded, mm = loaded.processor.process(ids, {"video": [spec.video(seed * 1000 + i)]}, {"fps": spec.rate})
        prompts.append(expanded)
        inputs.append(mm)
    return prompts, inputs
