"""Downmix to mono and resample (to 16 kHz unless told otherwise), one block at a time (soxr's streaming resampler: the result equals
resampling the whole signal at once, and memory holds only the output)."""

from __future__ import annotations

import numpy as np

TARGET_RATE = 16000
"""Hz, the default sample rate of decoded waveforms (what Qwen3-ASR's feature extractor takes; Qwen3-TTS's reference
audio asks for 24 kHz)."""

QUALITY = "HQ"
"""soxr's high-quality recipe (a linear-phase low-pass filter; librosa's default resampler, ``soxr_hq``)."""


class MonoResampler:
    """Collects blocks of ``[n, C]`` samples at ``source_rate`` Hz and returns their channel mean at
    ``target_rate`` Hz.

    Args:
        source_rate: Hz, the decoded stream's sample rate (positive).
        target_rate: Hz, the output's sample rate (positive; default :data:`TARGET_RATE`).

    Raises:
        ValueError: a rate not positive.
    """

    def __init__(self, source_rate: int, target_rate: int = TARGET_RATE):
        if source_rate <= 0 or target_rate <= 0:
            raise ValueError(f"sample rates must be positive, got {source_rate} -> {target_rate}")
        import soxr  # lazy: only audio requests need it

        self.source_rate = source_rate
        self.target_rate = target_rate
        self._stream = None if source_rate == target_rate else soxr.ResampleStream(
            source_rate, target_rate, 1, dtype="float32", quality=QUALITY)
        self._out: list[np.ndarray] = []
        self.frames_in = 0

    def push(self, block: np.ndarray) -> None:
        """Add ``block``: ``[n, C]`` float32 samples (any channel count ``C >= 1``) in time order."""
        mono = np.ascontiguousarray(block.mean(axis=1, dtype=np.float32))  # [n]
        self.frames_in += mono.shape[0]
        self._out.append(mono if self._stream is None else self._stream.resample_chunk(mono, last=False))

    def finish(self) -> np.ndarray:
        """The whole waveform so far, ``[N]`` float32 at ``target_rate`` (``N`` = ``round(frames_in * target_rate /
        source_rate)`` give or take one); flushes the resampler, so call once."""
        if self._stream is not None:
            self._out.append(self._stream.resample_chunk(np.zeros(0, dtype=np.float32), last=True))
        out = np.concatenate(self._out) if self._out else np.zeros(0, dtype=np.float32)
        self._out = []
        return out.astype(np.float32, copy=False)
