"""Audio I/O (:mod:`anna_audio.audio_io`): every container decodes to the 16 kHz mono float32 waveform, resampling
and downmixing keep the signal, and bad uploads (empty, truncated, wrong type, too long, too large) are 400s that
say why."""

from __future__ import annotations

import numpy as np
import pytest
from anna_audio.audio_io import FORMATS, TARGET_RATE, AudioLimits, decode_audio
from anna_core.errors import InvalidRequestError

from tests.audio.fixtures import PYAV_WRITES, SOUNDFILE_WRITES, dominant_hz, encode, rms, sweep, tone

# kind -> (container decode_audio reports, source rate written)
KINDS = {"wav": ("wav", 44100), "flac": ("flac", 22050), "ogg-vorbis": ("ogg", 44100), "ogg-opus": ("ogg", 48000),
         "mp3": ("mp3", 44100), "m4a": ("mp4", 44100), "webm": ("webm", 48000), "aac": ("aac", 32000)}
LOSSLESS = ("wav", "flac")


def stereo(mono: np.ndarray) -> np.ndarray:
    return np.stack([mono, 0.5 * mono], axis=1)  # [n, 2]: the mean is 0.75 * mono


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_container_decodes_to_16k_mono(kind):
    fmt, rate = KINDS[kind]
    source = stereo(tone(rate, 1.5, 1000.0))
    decoded = decode_audio(encode(kind, source, rate))
    assert (decoded.source_format, decoded.source_rate, decoded.source_channels) == (fmt, rate, 2)
    assert decoded.sample_rate == TARGET_RATE and decoded.samples.dtype == np.float32 and decoded.samples.ndim == 1
    # lossy encoders prime and pad by up to a few frames; the lossless ones keep every sample
    slack = 0.0 if kind in LOSSLESS else 0.1
    assert 1.5 - 1e-3 <= decoded.duration_s <= 1.5 + slack + 1e-3
    middle = decoded.samples[4000:20000]  # 1 s away from the edges (encoder start-up, resampler ramps)
    assert abs(dominant_hz(middle, TARGET_RATE) - 1000.0) <= 2.0  # bin width 1 Hz
    tolerance = 1e-3 if kind in LOSSLESS else 0.05  # MP3 at its default bit rate loses about 2 % of the power
    assert rms(middle) == pytest.approx(0.75 * 0.5 / np.sqrt(2), rel=tolerance)


def test_every_declared_container_is_covered():
    assert {KINDS[k][0] for k in KINDS} == set(FORMATS)
    assert set(KINDS) == set(SOUNDFILE_WRITES) | set(PYAV_WRITES)


def test_44k1_stereo_resamples_to_the_reference_within_bounds():
    """A 44.1 kHz stereo WAV against the same sweep computed directly at 16 kHz: the signals agree sample by sample
    (the resampler's delay is compensated, its pass band is flat), and the channel mean is the downmix."""
    seconds = 2.0
    left = sweep(44100, seconds)
    right = sweep(44100, seconds, amplitude=0.25)
    decoded = decode_audio(encode("wav", np.stack([left, right], axis=1), 44100))
    expected = 0.5 * (sweep(TARGET_RATE, seconds) + sweep(TARGET_RATE, seconds, amplitude=0.25))
    assert decoded.samples.shape == expected.shape == (32000,)
    inner = slice(800, -800)  # 50 ms from each edge: the filter's ramp-in and ramp-out
    error = np.abs(decoded.samples[inner] - expected[inner]).max()
    assert error <= 1e-4  # of a 0.375 peak: 16-bit PCM quantisation (1.5e-5) plus the filter's pass-band ripple
    assert rms(decoded.samples[inner]) == pytest.approx(rms(expected[inner]), rel=1e-3)


def test_a_16k_mono_upload_is_passed_through_unresampled():
    source = sweep(TARGET_RATE, 1.0)
    decoded = decode_audio(encode("flac", source, TARGET_RATE))
    np.testing.assert_allclose(decoded.samples, source, atol=2 ** -23)  # 24-bit PCM


def test_downmix_is_the_channel_mean():
    left, right = tone(TARGET_RATE, 1.0, 440.0), tone(TARGET_RATE, 1.0, 2000.0, amplitude=0.3)
    decoded = decode_audio(encode("flac", np.stack([left, right], axis=1), TARGET_RATE))
    np.testing.assert_allclose(decoded.samples, 0.5 * (left + right), atol=2 ** -23)


def test_the_container_is_found_from_its_bytes():
    wav = encode("wav", tone(TARGET_RATE, 0.5, 440.0), TARGET_RATE)
    assert decode_audio(wav).source_format == "wav"  # no file name is given: only the bytes say what it is


@pytest.mark.parametrize("data, message", [
    (b"", "the uploaded file is empty"),
    (b"\x89PNG\r\n\x1a\n" + bytes(64), r"unrecognised audio container \(supported: wav, flac, ogg, mp3, mp4, webm, "
                                       r"aac\); the first bytes are 89 50 4e 47"),
    (b"%PDF-1.7 not audio at all", "unrecognised audio container"),
    (b"plain text, not a sound", "unrecognised audio container"),
])
def test_empty_and_wrong_type_uploads_are_400s(data, message):
    with pytest.raises(InvalidRequestError, match=message) as caught:
        decode_audio(data)
    assert caught.value.param == "file" and str(caught.value).startswith("audio refused: ")


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_truncated_upload_is_a_400(kind):
    _, rate = KINDS[kind]
    data = encode(kind, stereo(sweep(rate, 2.0)), rate)
    with pytest.raises(InvalidRequestError, match="truncated|corrupt") as caught:
        decode_audio(data[: len(data) // 2])
    assert caught.value.param == "file"


@pytest.mark.parametrize("kind", ["wav", "flac", "mp3", "m4a"])
def test_a_header_alone_is_a_400(kind):
    _, rate = KINDS[kind]
    data = encode(kind, sweep(rate, 1.0), rate)
    with pytest.raises(InvalidRequestError, match="truncated|corrupt|no audio samples"):
        decode_audio(data[:48])


def test_corrupt_payload_behind_a_valid_magic_is_a_400():
    data = bytearray(encode("flac", sweep(TARGET_RATE, 1.0), TARGET_RATE))
    data[8:200] = bytes(192)  # STREAMINFO and the first frames zeroed
    with pytest.raises(InvalidRequestError, match="cannot decode the flac upload|truncated"):
        decode_audio(bytes(data))


def test_a_video_without_audio_is_a_400():
    import io

    import av

    out = io.BytesIO()
    with av.open(out, "w", format="webm") as container:
        stream = container.add_stream("libvpx", rate=10)
        stream.width = stream.height = 16
        stream.pix_fmt = "yuv420p"
        for i in range(3):
            frame = av.VideoFrame.from_ndarray(np.full((16, 16, 3), 40 * i, np.uint8), format="rgb24")
            frame.pts = i
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    with pytest.raises(InvalidRequestError, match="the webm upload holds no audio stream"):
        decode_audio(out.getvalue())


@pytest.mark.parametrize("kind", ["wav", "webm"])
def test_audio_over_the_duration_cap_is_a_400(kind):
    _, rate = KINDS[kind]
    data = encode(kind, sweep(rate, 3.0), rate)
    with pytest.raises(InvalidRequestError, match=r"over the limit of 2 s|longer than the limit of 2 s"):
        decode_audio(data, AudioLimits(max_duration_s=2.0))
    assert decode_audio(data, AudioLimits(max_duration_s=3.5)).duration_s == pytest.approx(3.0, abs=0.1)


def test_a_stream_that_hides_its_length_is_stopped_while_decoding():
    """A WAV whose header gives no length (streaming writers' RIFF size 0): the cap is enforced on the samples."""
    data = bytearray(encode("wav", sweep(TARGET_RATE, 3.0), TARGET_RATE))
    data[4:8] = (0xFFFFFFFF).to_bytes(4, "little")
    with pytest.raises(InvalidRequestError, match="longer than the limit of 1 s|over the limit of 1 s"):
        decode_audio(bytes(data), AudioLimits(max_duration_s=1.0))


def test_an_upload_over_the_byte_cap_is_a_400():
    data = encode("wav", sweep(TARGET_RATE, 1.0), TARGET_RATE)
    with pytest.raises(InvalidRequestError, match=rf"the upload is {len(data)} bytes, over the limit of 1000"):
        decode_audio(data, AudioLimits(max_bytes=1000))


def test_too_many_channels_is_a_400():
    data = encode("wav", np.tile(sweep(TARGET_RATE, 0.5)[:, None], (1, 3)), TARGET_RATE)
    with pytest.raises(InvalidRequestError, match="has 3 channels; 1 to 2 are accepted"):
        decode_audio(data, AudioLimits(max_channels=2))


def test_a_silent_header_with_no_samples_is_a_400():
    data = encode("wav", np.zeros(0, np.float32), TARGET_RATE)
    with pytest.raises(InvalidRequestError, match="no audio samples|corrupt"):
        decode_audio(data)


@pytest.mark.parametrize("bad", [{"max_bytes": 0}, {"max_duration_s": float("inf")}, {"max_channels": -1}])
def test_limits_must_be_positive(bad):
    with pytest.raises(ValueError, match=f"AudioLimits.{next(iter(bad))} must be a positive finite number"):
        AudioLimits(**bad)


def test_a_flac_of_unknown_length_decodes():
    """A FLAC written to a pipe leaves STREAMINFO's total-samples field 0 ("unknown"); libsndfile then reports
    2**63 - 1 frames, which was read as a declared length of 576 trillion seconds and refused."""
    source = tone(TARGET_RATE, 1.0, 440.0)
    data = bytearray(encode("flac", source, TARGET_RATE))
    assert data[:4] == b"fLaC"
    data[21] &= 0xF0  # STREAMINFO's 36-bit total samples: the low 4 bits of byte 21 and bytes 22-25
    data[22:26] = bytes(4)
    decoded = decode_audio(bytes(data))
    assert decoded.samples.shape == source.shape
    np.testing.assert_allclose(decoded.samples, source, atol=2 ** -15)
