"""Long audio cut into windows at its quiet points: every cut inside a silence, no window over the limit, windows
covering the audio without gaps."""

import itertools

import numpy as np
import pytest
from anna_audio.transcribe.windows import split_windows

RATE = 16000


def speech_like(seconds: float, silences: list[tuple[float, float]], seed: int = 0) -> np.ndarray:
    """Noise bursts at 0.3 amplitude with a 4 Hz syllable envelope, silent (1e-4 noise) in ``silences``."""
    rng = np.random.default_rng(seed)
    n = round(seconds * RATE)
    t = np.arange(n) / RATE
    envelope = 0.6 + 0.4 * np.abs(np.sin(2 * np.pi * 4 * t))
    x = (0.3 * envelope * rng.standard_normal(n)).astype(np.float32)
    for a, b in silences:
        x[round(a * RATE):round(b * RATE)] = 1e-4 * rng.standard_normal(round(b * RATE) - round(a * RATE))
    return x


def test_short_audio_is_one_window():
    x = speech_like(3.0, [])
    assert [(w.start, w.end) for w in split_windows(x, 10.0)] == [(0, x.shape[0])]
    assert split_windows(np.zeros(0, np.float32), 10.0) == []


def test_cuts_land_in_silences():
    silences = [(7.0, 7.4), (15.5, 15.8), (23.0, 23.3), (27.2, 27.6), (33.0, 33.3)]
    x = speech_like(40.0, silences)
    windows = split_windows(x, 10.0, search_s=4.0)
    assert windows[0].start == 0 and windows[-1].end == x.shape[0]
    assert all(a.end == b.start for a, b in itertools.pairwise(windows))
    assert all(w.end - w.start <= 10.0 * RATE for w in windows)
    cuts = [w.end / RATE for w in windows[:-1]]
    for cut in cuts:
        assert any(a <= cut <= b for a, b in silences), (cut, cuts)
    # the quiet stretch within reach of each start: 7.0-7.4 from 0, 15.5-15.8 from ~7.4, 23.0-23.3 from ~15.8, ...
    assert [next(i for i, (a, b) in enumerate(silences) if a <= c <= b) for c in cuts] == [0, 1, 2, 4]


def test_no_silence_still_respects_the_limit():
    x = speech_like(25.0, [], seed=3)
    windows = split_windows(x, 6.0, search_s=2.0)
    assert all(0 < w.end - w.start <= 6 * RATE for w in windows)
    assert all(w.end - w.start >= 4 * RATE for w in windows[:-1])  # cut within the searched 2 s
    assert sum(w.end - w.start for w in windows) == x.shape[0]


@pytest.mark.parametrize("bad", [{"max_window_s": 0}, {"max_window_s": 10, "search_s": -1}, {"max_window_s": 0.001}])
def test_bad_arguments(bad):
    with pytest.raises(ValueError):
        split_windows(np.zeros(100, np.float32), **bad)
