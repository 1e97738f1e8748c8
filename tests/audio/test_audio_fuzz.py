"""Damaged uploads never escape as anything but a 400: seeded corruptions of every container (bytes flipped,
cut at random points, a valid magic followed by noise) either decode or raise ``InvalidRequestError``."""

from __future__ import annotations

import random

import numpy as np
import pytest
from anna_audio.audio_io import AudioLimits, decode_audio
from anna_core.errors import InvalidRequestError

from tests.audio.fixtures import encode, sweep
from tests.audio.test_audio_decode import KINDS

TRIALS = 400  # the m4a cases reach a stream FFmpeg has no decoder for (trial 322), once a crash
LIMITS = AudioLimits(max_duration_s=60.0)


def _damaged(data: bytes, rng: random.Random) -> bytes:
    kind = rng.randrange(3)
    if kind == 0:  # flip a few bytes anywhere, the header included
        out = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            out[rng.randrange(len(out))] = rng.randrange(256)
        return bytes(out)
    if kind == 1:  # cut anywhere
        return data[:rng.randrange(1, len(data))]
    return data[:rng.randint(4, 64)] + rng.randbytes(rng.randint(0, 4096))  # the header, then noise


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_damaged_uploads_decode_or_are_400s(kind):
    _, rate = KINDS[kind]
    data = encode(kind, np.stack([sweep(rate, 1.0), sweep(rate, 1.0, amplitude=0.2)], axis=1), rate)
    rng = random.Random(f"{kind}-fuzz")
    refused = 0
    for _ in range(TRIALS):
        damaged = _damaged(data, rng)
        try:
            out = decode_audio(damaged, LIMITS)
        except InvalidRequestError as exc:
            assert exc.param == "file" and str(exc).startswith("audio refused: ")
            refused += 1
            continue
        assert out.samples.dtype == np.float32 and out.samples.ndim == 1 and out.samples.shape[0] > 0
        assert np.isfinite(out.samples).all()
    assert refused > 0  # the corruptions do reach the refusals
