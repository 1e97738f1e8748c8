"""Log-mel features (:mod:`anna_audio.features`) of generated audio: shapes and padding, where a tone lands, how
loudness moves them, a 44.1 kHz stereo upload against the same sweep made at 16 kHz, and the encoder rows against
transformers' own Qwen3-ASR encoder."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from anna_audio.audio_io import decode_audio
from anna_audio.features import AudioFeatures, LogMelFeatures, encoder_rows

from tests.audio.fixtures import encode, sweep, tone

RATE = 16000


@pytest.fixture(scope="module")
def extract() -> LogMelFeatures:
    return LogMelFeatures()


@pytest.mark.parametrize("samples, frames, padded", [
    (16000, 100, 100),  # one second: 100 frames of 10 ms, one encoder window
    (16160, 101, 200),  # one frame more opens a second window
    (40037, 250, 300),
    (4000, 50, 100),  # shorter than 0.5 s: zero-padded to 8000 samples first, as Qwen3-ASR does
])
def test_shapes_and_padding(extract, samples, frames, padded):
    out = extract(sweep(RATE, samples / RATE))
    assert isinstance(out, AudioFeatures)
    assert out.features.dtype == torch.float32 and tuple(out.features.shape) == (128, padded)
    assert out.num_frames == frames
    assert out.num_rows == encoder_rows(frames)
    assert torch.count_nonzero(out.features[:, frames:]) == 0  # the window padding is zeros
    valid = out.features[:, :frames]
    assert valid.max() - valid.min() <= 2.0 + 1e-6  # log10 clamped to 8 below the peak, scaled by 1/4


def test_a_tone_peaks_in_its_mel_bin(extract):
    """1 kHz is 15 Slaney mels (linear below 1 kHz: 3 f / 200); 128 bins spread over 0-8 kHz (0-45.2 mels) put their
    centres 0.350 mel apart from the first at 0.350, so bin 42 (centre 15.06 mels) holds it."""
    out = extract(tone(RATE, 1.0, 1000.0))
    peaks = out.features[:, 2:out.num_frames - 2].argmax(dim=0)
    assert set(peaks.tolist()) == {42}


def test_twice_the_amplitude_adds_log10_4_over_4_everywhere(extract):
    quiet, loud = extract(tone(RATE, 1.0, 1000.0, 0.2)), extract(tone(RATE, 1.0, 1000.0, 0.4))
    n = quiet.num_frames
    shift = loud.features[:, :n] - quiet.features[:, :n]
    assert torch.allclose(shift, torch.full_like(shift, np.log10(4.0) / 4), atol=1e-5)


def test_a_44k1_stereo_upload_gives_the_features_of_the_16k_mono_sweep(extract):
    """Bounds: mel bins within 40 dB of the clip's peak (log-mel within 1.0 of its maximum) agree within 1e-4; every
    bin within 0.2 (the quietest bins sit at the 16-bit PCM noise floor of the upload)."""
    left, right = sweep(44100, 2.0), sweep(44100, 2.0, amplitude=0.25)
    upload = decode_audio(encode("wav", np.stack([left, right], axis=1), 44100))
    reference = 0.5 * (sweep(RATE, 2.0) + sweep(RATE, 2.0, amplitude=0.25))
    got, want = extract(upload.samples), extract(reference)
    assert got.num_frames == want.num_frames == 200 and got.features.shape == want.features.shape
    inner = slice(5, 195)  # 50 ms from each edge: the resampler's ramps
    a, b = got.features[:, inner], want.features[:, inner]
    loud = b > b.max() - 1.0
    assert loud.float().mean() > 0.05  # the sweep's band: a fair share of the bins
    assert (a - b)[loud].abs().max() <= 1e-4
    assert (a - b).abs().max() <= 0.2


@pytest.mark.parametrize("seconds", [0.3, 1.0, 1.01, 2.5, 9.87])
def test_encoder_rows_match_transformers_encoder(extract, seconds):
    """The rows :func:`encoder_rows` promises are the rows transformers' Qwen3-ASR encoder (tiny, random) makes of
    these features: the placeholders a prompt must hold."""
    from transformers import Qwen3ASREncoderConfig
    from transformers.models.qwen3_asr.modeling_qwen3_asr import Qwen3ASREncoder

    torch.manual_seed(0)
    config = Qwen3ASREncoderConfig(num_mel_bins=128, encoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=32,
                                   d_model=16, output_dim=16, n_window=50, n_window_infer=100,
                                   downsample_hidden_size=8, max_position_embeddings=13)
    encoder = Qwen3ASREncoder(config).eval()
    out = extract(sweep(RATE, seconds))
    mask = torch.zeros(1, out.features.shape[1], dtype=torch.long)
    mask[0, :out.num_frames] = 1
    with torch.no_grad():
        rows = encoder(out.features[None], mask).last_hidden_state.shape[0]
    assert rows == out.num_rows == encoder_rows(out.num_frames)


@pytest.mark.parametrize("frames, rows", [(0, 0), (1, 1), (99, 13), (100, 13), (101, 14), (250, 33), (1234, 161)])
def test_encoder_rows_arithmetic(frames, rows):
    assert encoder_rows(frames) == rows


def test_bad_inputs_are_refused(extract):
    with pytest.raises(ValueError, match=r"non-empty \[N\] array, got shape \(0,\)"):
        extract(np.zeros(0, np.float32))
    with pytest.raises(ValueError, match=r"got shape \(10, 2\)"):
        extract(np.zeros((10, 2), np.float32))
    with pytest.raises(ValueError, match="n_window must be positive"):
        LogMelFeatures(n_window=0)
    with pytest.raises(ValueError, match="encoder_rows needs"):
        encoder_rows(-1)


def test_from_checkpoint_reads_the_folder(tmp_path):
    from transformers import Qwen3ASRFeatureExtractor

    Qwen3ASRFeatureExtractor(feature_size=80).save_pretrained(str(tmp_path))
    assert LogMelFeatures.from_checkpoint(tmp_path).num_mel_bins == 80
    with pytest.raises(FileNotFoundError, match="preprocessor_config.json"):
        LogMelFeatures.from_checkpoint(tmp_path / "missing")


def test_the_settings_are_those_qwen3_asr_processor_passes(extract):
    """Called as transformers' ``Qwen3ASRProcessor`` calls the extractor (its ``audio_kwargs``), the same features."""
    from transformers import Qwen3ASRProcessor

    samples = sweep(RATE, 1.37)
    reference = extract.extractor(samples, **Qwen3ASRProcessor.audio_kwargs, return_tensors="pt")
    out = extract(samples)
    assert torch.equal(out.features, reference["input_features"][0])
    assert out.num_frames == int(reference["attention_mask"][0].sum()) == 137


def test_the_batched_torch_path_equals_each_clip_alone(extract):
    """:meth:`LogMelFeatures.batch` (the model's device path: one STFT over clips of different lengths and levels)
    against transformers' extractor on each clip alone: the same frame counts, rows and widths, values within
    ``BATCH_TOLERANCE`` (on the CPU they come out bit-equal)."""
    from anna_audio.features import BATCH_TOLERANCE

    rng = np.random.default_rng(0)
    lengths = [3000, 8000, 8001, 16000, 16159, 16160, 33333, 160 * 700 + 17]  # under 0.5 s, frame and window edges
    clips = [(10 ** rng.uniform(-3, 0)) * (sweep(RATE, n / RATE) + 0.05 * rng.standard_normal(n)).astype(np.float32)
             for n in lengths]
    clips[3][:] = 0.0  # silence: the clamp's peak is the floor
    got = extract.batch(clips)
    for clip_, mine in zip(clips, got):
        ref = extract(clip_)
        assert (mine.num_frames, mine.num_rows) == (ref.num_frames, ref.num_rows) == (
            extract.num_frames(clip_.shape[0]), encoder_rows(ref.num_frames))
        assert mine.features.shape == ref.features.shape == (128, extract.padded_frames(ref.num_frames))
        assert mine.features.dtype == torch.float32
        assert (mine.features - ref.features).abs().max().item() <= BATCH_TOLERANCE
        assert not mine.features[:, mine.num_frames:].any()  # zeros past the clip's frames, as the extractor pads
    alone = extract.batch([torch.from_numpy(clips[6])])[0]  # a batch of one, from a tensor
    assert torch.equal(alone.features, got[6].features)


def test_the_batched_path_refuses_bad_clips(extract):
    with pytest.raises(ValueError, match="at least one clip"):
        extract.batch([])
    with pytest.raises(ValueError, match=r"non-empty \[N\] array, got shapes \[\(0,\)\]"):
        extract.batch([np.zeros(16000, np.float32), np.zeros(0, np.float32)])
    from transformers import Qwen3ASRFeatureExtractor

    with pytest.raises(ValueError, match="without dither"):
        LogMelFeatures(Qwen3ASRFeatureExtractor(dither=1.0)).batch([np.zeros(16000, np.float32)])
