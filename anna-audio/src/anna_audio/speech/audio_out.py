"""Encoding synthesized audio (float32 samples in ``[-1, 1]``, mono) into the response formats of OpenAI's speech
API, with libsndfile (``soundfile``): ``wav`` (16-bit PCM), ``flac`` (16-bit), ``mp3``, ``opus`` (in Ogg) and ``pcm``
(raw 16-bit signed little-endian samples, no header).

``pcm`` and ``wav`` encode chunk by chunk (a streamed WAV's header gives the largest sizes, as streaming writers do,
because the length is not known when it is sent); the compressed formats encode the whole waveform at once.
"""

from __future__ import annotations

import io
import struct

import numpy as np
import soundfile as sf
from anna_core.errors import InvalidRequestError

RESPONSE_FORMATS = ("mp3", "opus", "wav", "flac", "pcm")
"""Every ``response_format`` accepted (OpenAI's ``aac`` is not: libsndfile cannot write it)."""
MEDIA_TYPES = {"mp3": "audio/mpeg", "opus": "audio/ogg", "wav": "audio/wav", "flac": "audio/flac",
               "pcm": "audio/pcm"}
CHUNKED = ("pcm", "wav")
"""Formats whose bytes are produced as the audio is (streamed responses send them chunk by chunk)."""
_SOUNDFILE = {"mp3": ("MP3", "MPEG_LAYER_III"), "opus": ("OGG", "OPUS"), "wav": ("WAV", "PCM_16"),
              "flac": ("FLAC", "PCM_16")}


def check_format(response_format: str) -> str:
    """``response_format`` if it is one of :data:`RESPONSE_FORMATS`.

    Raises:
        InvalidRequestError: any other value (``param`` ``response_format``).
    """
    if response_format not in RESPONSE_FORMATS:
        extra = " (aac cannot be encoded here)" if response_format == "aac" else ""
        raise InvalidRequestError(f"response_format must be one of {', '.join(RESPONSE_FORMATS)}{extra}",
                                  param="response_format")
    return response_format


def pcm16(samples: np.ndarray) -> bytes:
    """float samples ``[N]`` in ``[-1, 1]`` -> 16-bit signed little-endian bytes (rounded, clipped)."""
    clipped = np.clip(np.asarray(samples, dtype=np.float32), -1.0, 1.0)
    return np.round(clipped * 32767.0).astype("<i2").tobytes()


def wav_header(sample_rate: int, num_samples: int | None = None) -> bytes:
    """A 44-byte RIFF/WAVE header of mono 16-bit PCM; ``num_samples`` None: the largest sizes (a streamed file)."""
    data = 0xFFFFFFFF - 36 if num_samples is None else 2 * num_samples
    return (b"RIFF" + struct.pack("<I", data + 36) + b"WAVEfmt " +
            struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, 2 * sample_rate, 2, 16) + b"data" + struct.pack("<I", data))


def encode(samples: np.ndarray, sample_rate: int, response_format: str) -> bytes:
    """The whole waveform ``[N]`` float32 as a file of ``response_format``."""
    check_format(response_format)
    if response_format == "pcm":
        return pcm16(samples)
    fmt, subtype = _SOUNDFILE[response_format]
    out = io.BytesIO()
    data = np.asarray(samples, dtype=np.float32)
    if subtype == "PCM_16":  # the same 16-bit values as ``pcm`` (libsndfile's own float conversion rounds otherwise)
        data = np.frombuffer(pcm16(data), dtype="<i2")
    sf.write(out, data, sample_rate, format=fmt, subtype=subtype)
    return out.getvalue()


class ChunkEncoder:
    """A streamed response's bytes for ``response_format``: :meth:`feed` each chunk of samples, then :meth:`finish`;
    the pieces concatenate to a playable file (for ``pcm`` / ``wav`` they arrive with the audio, the other formats
    come whole from :meth:`finish`)."""

    def __init__(self, sample_rate: int, response_format: str):
        self.sample_rate = sample_rate
        self.format = check_format(response_format)
        self._started = False
        self._held: list[np.ndarray] = []

    def feed(self, samples: np.ndarray) -> bytes:
        if self.format not in CHUNKED:
            self._held.append(np.asarray(samples, dtype=np.float32))
            return b""
        head = b""
        if self.format == "wav" and not self._started:
            head = wav_header(self.sample_rate)
        self._started = True
        return head + pcm16(samples)

    def finish(self) -> bytes:
        if self.format in CHUNKED:
            return b"" if self._started or self.format == "pcm" else wav_header(self.sample_rate)
        whole = np.concatenate(self._held) if self._held else np.zeros(0, dtype=np.float32)
        return encode(whole, self.sample_rate, self.format)
