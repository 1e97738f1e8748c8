"""Several requests' code frames streamed through the ``speech`` task's
:class:`~anna_audio.speech.vocoder.Vocoder` chunk by chunk, shared by its eager and graph tests."""

from __future__ import annotations

import numpy as np
import torch
from anna_audio.qwen3_tts.stream_state import StreamState
from anna_audio.speech.service import ChunkPolicy, FrameChunker
from anna_audio.speech.vocoder import Vocoder


class ChunkedStreams:
    """Streams of ``codes`` (per request ``[F_i, G]`` int64) decoded by ``vocoder``, each cut into chunks by its own
    :class:`FrameChunker` of ``policy``: :meth:`arrive` feeds the frames one at a time across the streams (as the
    engine makes them), waiting for each frame's chunks together, and :meth:`flush` decodes every stream's last,
    shorter chunk. ``pieces[i]``: stream ``i``'s decoded waveform pieces (float32 samples); ``submitted``: the
    chunks handed to the vocoder."""

    def __init__(self, vocoder: Vocoder, codes: list[torch.Tensor], policy: ChunkPolicy) -> None:
        self.vocoder, self.codes = vocoder, codes
        self.chunkers = [FrameChunker(policy) for _ in codes]
        self.states = [StreamState() for _ in codes]
        self.pieces: list[list[np.ndarray]] = [[] for _ in codes]
        self.submitted = 0

    def arrive(self) -> None:
        for t in range(max(c.shape[0] for c in self.codes)):
            futures = []
            for i, c in enumerate(self.codes):
                if t < c.shape[0]:
                    futures += [(i, self.vocoder.decode(self.states[i], chunk))
                                for chunk in self.chunkers[i].push([c[t]])]
            for i, f in futures:
                self.pieces[i].append(f.result())
            self.submitted += len(futures)

    def flush(self) -> None:
        for i, chunker in enumerate(self.chunkers):
            rest = chunker.flush()
            if rest is not None:
                self.pieces[i].append(self.vocoder.decode(self.states[i], rest).result())
                self.submitted += 1
