"""The Base speaker encoder (:mod:`anna_audio.qwen3_tts.speaker_encoder`) against the reference's golden outputs:
the log-mel frames of the reference audio and the x-vector made from them."""

from __future__ import annotations

import pytest
import torch
from anna_audio.qwen3_tts import load_config
from anna_audio.qwen3_tts.speaker_encoder import speaker_mels
from anna_audio.qwen3_tts.weights import load_speaker_encoder

from tests.audio.tts_golden import CHECKPOINTS, golden


def test_mels_match_reference():
    g, _ = golden("base")
    energies, reference = speaker_mels(g["ref/audio"]).exp(), g["ref/mels"].exp()
    # compared as energies: float32 STFT rounding is absolute (about 1e-7 of the loudest bin), so the log of a
    # near-silent bin differs by up to ~4e-3 between CPUs whose FFT rounds differently (seen on an AVX-512 machine)
    torch.testing.assert_close(energies, reference, atol=1e-6 * float(reference.max()), rtol=1e-4)


def test_speaker_embedding_matches_reference():
    g, _ = golden("base")
    config = load_config(CHECKPOINTS["base"])
    encoder = load_speaker_encoder(CHECKPOINTS["base"], config)
    with torch.inference_mode():
        embedding = encoder(speaker_mels(g["ref/audio"])[None])[0]
        twice = encoder(torch.stack([g["ref/mels"], g["ref/mels"]]))
    assert embedding.shape == (config.talker.shape.hidden_size,)
    torch.testing.assert_close(embedding, g["ref/speaker_embedding"], atol=1e-4, rtol=0)
    torch.testing.assert_close(twice[1], twice[0], atol=1e-6, rtol=0)


def test_errors():
    golden("base")
    with pytest.raises(ValueError, match="24 kHz"):
        speaker_mels(torch.zeros(24000), sample_rate=16000)
    with pytest.raises(ValueError, match=r"audio must be \[N\]"):
        speaker_mels(torch.zeros(100))
    config = load_config(CHECKPOINTS["voice_design"])
    with pytest.raises(ValueError, match="no speaker encoder"):
        load_speaker_encoder(CHECKPOINTS["voice_design"], config)
