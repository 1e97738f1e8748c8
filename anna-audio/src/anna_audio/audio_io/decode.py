"""The entry point: an uploaded file's bytes -> :class:`DecodedAudio`, within :class:`AudioLimits`."""

from __future__ import annotations

import math

import attrs
import numpy as np

from anna_audio.audio_io.backends import OPENERS
from anna_audio.audio_io.containers import FORMATS, check_complete, sniff
from anna_audio.audio_io.errors import refuse
from anna_audio.audio_io.resample import TARGET_RATE, MonoResampler

MIN_SOURCE_RATE = 1000
MAX_SOURCE_RATE = 384000
"""Hz, the source sample rates accepted (bounds a block's size and the resampling ratio)."""

TRUNCATION_SLACK = (0.01, 0.1)
"""``(share, seconds)``: a stream is truncated when it decodes to less than its declared duration minus the larger
of ``share`` of it and ``seconds`` (encoders pad and prime by a few frames; a lost tail is much longer)."""


def _positive(_instance, attribute, value) -> None:
    if not (isinstance(value, int | float) and not isinstance(value, bool) and value > 0 and math.isfinite(value)):
        raise ValueError(f"AudioLimits.{attribute.name} must be a positive finite number, got {value!r}")


@attrs.frozen
class AudioLimits:
    """Caps on one audio upload.

    Attributes:
        max_bytes: bytes, the largest upload (default 25 MiB, OpenAI's transcription limit).
        max_duration_s: seconds of audio, checked against the container's declared duration before decoding and
            against the samples as they decode (default 1800: half an hour).
        max_channels: channels of the source stream (default 8).

    Raises:
        ValueError: a cap that is not a positive finite number.
    """

    max_bytes: int = attrs.field(default=25 * 1024 * 1024, validator=_positive)
    max_duration_s: float = attrs.field(default=1800.0, validator=_positive)
    max_channels: int = attrs.field(default=8, validator=_positive)


@attrs.frozen
class DecodedAudio:
    """A decoded upload.

    Attributes:
        samples: ``[N]`` float32, mono (the channels' mean) at ``sample_rate`` Hz, nominally in ``[-1, 1]``.
        source_format: the container (a key of :data:`~anna_audio.audio_io.containers.FORMATS`).
        source_rate: Hz, the decoded stream's sample rate.
        source_channels: the decoded stream's channel count.
        sample_rate: Hz of ``samples`` (what :func:`decode_audio` was asked for; default :data:`TARGET_RATE`).
    """

    samples: np.ndarray
    source_format: str
    source_rate: int
    source_channels: int
    sample_rate: int = TARGET_RATE

    @property
    def duration_s(self) -> float:
        """Seconds of audio: ``N / sample_rate``."""
        return self.samples.shape[0] / self.sample_rate


def decode_audio(data: bytes, limits: AudioLimits | None = None, sample_rate: int = TARGET_RATE) -> DecodedAudio:
    """Decode an uploaded audio file to a mono float32 waveform at ``sample_rate`` (default 16 kHz).

    The container is identified from the bytes alone (:func:`~anna_audio.audio_io.containers.sniff`); the stream is
    decoded block by block, each block averaged over its channels and resampled (soxr, streaming), so memory holds
    one source block and the output.

    Args:
        data: the file's bytes.
        limits: caps (default :class:`AudioLimits` ()).
        sample_rate: Hz of the result (positive; 24000 for Qwen3-TTS reference audio).

    Returns:
        The :class:`DecodedAudio`.

    Raises:
        InvalidRequestError: (HTTP 400, ``param`` ``"file"``) an empty upload; one over ``max_bytes``; an
            unrecognised container; corrupt or truncated data; no audio stream; a sample rate outside
            [:data:`MIN_SOURCE_RATE`, :data:`MAX_SOURCE_RATE`] Hz; more than ``max_channels`` channels; audio longer
            than ``max_duration_s`` (declared or decoded); no samples.
    """
    limits = limits or AudioLimits()
    if len(data) > limits.max_bytes:
        raise refuse(f"the upload is {len(data)} bytes, over the limit of {limits.max_bytes}")
    fmt = sniff(data)
    check_complete(fmt, data)
    with OPENERS[FORMATS[fmt]](data, fmt) as (header, blocks):
        _check_header(fmt, header.sample_rate, header.channels, header.declared_s, limits)
        resampler = MonoResampler(header.sample_rate, sample_rate)
        cap = math.ceil(limits.max_duration_s * header.sample_rate)
        for block in blocks:
            if block.shape[1] != header.channels:
                raise refuse(f"the {fmt} upload changes its channel count mid-stream ({header.channels} -> "
                             f"{block.shape[1]})")
            resampler.push(block)
            if resampler.frames_in > cap:
                raise refuse(f"the audio is longer than the limit of {limits.max_duration_s:g} s")
    if resampler.frames_in == 0:
        raise refuse(f"the {fmt} upload holds no audio samples")
    decoded_s = resampler.frames_in / header.sample_rate
    if header.declared_s is not None:
        share, seconds = TRUNCATION_SLACK
        if decoded_s < header.declared_s - max(share * header.declared_s, seconds):
            raise refuse(f"truncated {fmt} upload: {decoded_s:.2f} s decoded of the {header.declared_s:.2f} s its "
                         "header declares")
    return DecodedAudio(samples=resampler.finish(), source_format=fmt, source_rate=header.sample_rate,
                        source_channels=header.channels, sample_rate=sample_rate)


def _check_header(fmt: str, rate: int, channels: int, declared_s: float | None, limits: AudioLimits) -> None:
    if not MIN_SOURCE_RATE <= rate <= MAX_SOURCE_RATE:
        raise refuse(f"the {fmt} upload's sample rate {rate} Hz is outside {MIN_SOURCE_RATE}-{MAX_SOURCE_RATE} Hz")
    if not 1 <= channels <= limits.max_channels:
        raise refuse(f"the {fmt} upload has {channels} channels; 1 to {limits.max_channels} are accepted")
    if declared_s is not None and declared_s > limits.max_duration_s:
        raise refuse(f"the audio lasts {declared_s:.1f} s, over the limit of {limits.max_duration_s:g} s")
