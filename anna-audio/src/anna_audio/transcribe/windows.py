"""Long audio -> windows the speech model accepts, cut where the signal is quietest.

The waveform's loudness is measured as the RMS of short frames (:data:`FRAME_S`), smoothed over
:data:`SMOOTH_S`; each cut is placed at the quietest smoothed frame in the last ``search_s`` seconds before the
window would reach ``max_window_s`` (the latest of equally quiet frames, so windows stay long). Every window is at
most ``max_window_s`` long; audio that fits one window is not cut. Each window is transcribed on its own and the
texts are joined in order.
"""

from __future__ import annotations

import math

import attrs
import numpy as np

FRAME_S = 0.01
"""Seconds per loudness frame (10 ms)."""
SMOOTH_S = 0.1
"""Seconds of frames averaged before looking for the quietest point (so a cut lands inside a pause, not in the
gap between two syllables)."""
DEFAULT_SEARCH_S = 5.0
"""Seconds before a window's limit searched for a cut."""


@attrs.frozen
class AudioWindow:
    """One window of a waveform: samples ``[start, end)`` at ``sample_rate`` Hz."""

    start: int
    end: int
    sample_rate: int = 16000

    @property
    def start_s(self) -> float:
        """Seconds from the start of the audio to the window's first sample."""
        return self.start / self.sample_rate

    @property
    def end_s(self) -> float:
        """Seconds from the start of the audio to the end of the window."""
        return self.end / self.sample_rate


def frame_loudness(samples: np.ndarray, frame: int, smooth: int) -> np.ndarray:
    """``[ceil(N / frame)]`` float64: each frame's RMS, averaged over ``smooth`` frames centred on it.

    Raises:
        ValueError: ``samples`` is not 1-D, or ``frame`` / ``smooth`` is not positive.
    """
    if samples.ndim != 1 or frame <= 0 or smooth <= 0:
        raise ValueError(f"frame_loudness needs 1-D samples and positive sizes, got shape {samples.shape}, "
                         f"frame {frame}, smooth {smooth}")
    n = math.ceil(samples.shape[0] / frame)
    padded = np.zeros(n * frame, dtype=np.float64)
    padded[:samples.shape[0]] = samples
    rms = np.sqrt(np.mean(padded.reshape(n, frame) ** 2, axis=1))
    if smooth == 1 or n == 0:
        return rms
    kernel = np.ones(smooth) / smooth
    return np.convolve(rms, kernel, mode="same")


def split_windows(samples: np.ndarray, max_window_s: float, *, sample_rate: int = 16000,
                  search_s: float = DEFAULT_SEARCH_S) -> list[AudioWindow]:
    """Cut ``samples`` (``[N]`` float32 at ``sample_rate`` Hz) into consecutive windows of at most
    ``max_window_s`` seconds, each cut at the quietest point of the ``search_s`` seconds before the limit.

    Returns:
        windows covering ``[0, N)`` in order, without gaps or overlaps (one window when the audio fits; none for
        empty audio).

    Raises:
        ValueError: ``samples`` is not 1-D, or ``max_window_s`` / ``search_s`` is not positive, or
            ``max_window_s`` is shorter than a loudness frame.
    """
    if samples.ndim != 1:
        raise ValueError(f"split_windows needs a 1-D waveform, got shape {samples.shape}")
    if not (max_window_s > 0 and search_s > 0):
        raise ValueError(f"max_window_s and search_s must be positive, got {max_window_s}, {search_s}")
    frame = max(1, round(FRAME_S * sample_rate))
    limit = int(max_window_s * sample_rate)
    if limit < frame:
        raise ValueError(f"max_window_s {max_window_s} is shorter than a {FRAME_S} s loudness frame")
    total = samples.shape[0]
    if total <= limit:
        return [AudioWindow(0, total, sample_rate)] if total else []
    loud = frame_loudness(samples, frame, max(1, round(SMOOTH_S / FRAME_S)))
    limit_frames = limit // frame
    search = max(1, min(limit_frames, int(search_s * sample_rate) // frame))
    windows, start = [], 0
    while total - start > limit:
        first = start // frame  # windows start on frame boundaries (every cut is one)
        hi = first + limit_frames  # frames [first, hi) fit the window
        lo = hi - search
        quiet = loud[lo:hi]
        # the latest of the quietest frames; cut at its end (a frame boundary inside the pause)
        cut_frame = lo + int(np.flatnonzero(quiet == quiet.min())[-1])
        end = min(total, (cut_frame + 1) * frame)
        windows.append(AudioWindow(start, end, sample_rate))
        start = end
    windows.append(AudioWindow(start, total, sample_rate))
    return windows
