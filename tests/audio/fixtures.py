"""Audio fixtures generated in the tests: a sine sweep written to every container (soundfile where libsndfile
writes it, PyAV for MP4 / WebM / AAC), so no audio file is stored and nothing is downloaded."""

from __future__ import annotations

import io

import numpy as np

SWEEP_HZ = (200.0, 1800.0)
"""Hz, the sweep's start and end frequencies (both well inside a 16 kHz signal's 8 kHz band)."""

# (libsndfile format, subtype) of each container soundfile writes; Opus in Ogg takes 48 kHz only
SOUNDFILE_WRITES = {"wav": ("WAV", "PCM_16"), "flac": ("FLAC", "PCM_24"), "ogg-vorbis": ("OGG", "VORBIS"),
                    "ogg-opus": ("OGG", "OPUS"), "mp3": ("MP3", "MPEG_LAYER_III")}
# (PyAV container format, codec) of each container FFmpeg writes
PYAV_WRITES = {"m4a": ("ipod", "aac"), "webm": ("webm", "libopus"), "aac": ("adts", "aac")}


def sweep(rate: int, seconds: float, *, amplitude: float = 0.5, f0: float = SWEEP_HZ[0],
          f1: float = SWEEP_HZ[1]) -> np.ndarray:
    """``[round(rate * seconds)]`` float32: a linear sweep from ``f0`` to ``f1`` Hz."""
    t = np.arange(round(rate * seconds), dtype=np.float64) / rate
    phase = 2 * np.pi * (f0 * t + (f1 - f0) * t * t / (2 * seconds))
    return (amplitude * np.sin(phase)).astype(np.float32)


def tone(rate: int, seconds: float, hz: float, amplitude: float = 0.5) -> np.ndarray:
    """``[round(rate * seconds)]`` float32: a sine of ``hz`` Hz."""
    t = np.arange(round(rate * seconds), dtype=np.float64) / rate
    return (amplitude * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def write_soundfile(kind: str, samples: np.ndarray, rate: int) -> bytes:
    """``samples`` (``[n]`` or ``[n, C]`` float32) encoded as ``kind`` (a :data:`SOUNDFILE_WRITES` key)."""
    import soundfile

    fmt, subtype = SOUNDFILE_WRITES[kind]
    out = io.BytesIO()
    soundfile.write(out, samples, rate, format=fmt, subtype=subtype)
    return out.getvalue()


def write_pyav(kind: str, samples: np.ndarray, rate: int) -> bytes:
    """``samples`` (``[n, C]`` float32, C of 1 or 2) encoded as ``kind`` (a :data:`PYAV_WRITES` key)."""
    import av

    fmt, codec = PYAV_WRITES[kind]
    samples = samples.reshape(samples.shape[0], -1)
    layout = "mono" if samples.shape[1] == 1 else "stereo"
    out = io.BytesIO()
    with av.open(out, "w", format=fmt) as container:
        stream = container.add_stream(codec, rate=rate, layout=layout)
        ctx = stream.codec_context
        convert = av.AudioResampler(format=ctx.format.name, layout=layout, rate=rate, frame_size=ctx.frame_size or 1024)
        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(samples.T), format="fltp", layout=layout)
        frame.sample_rate, frame.pts = rate, 0
        for part in convert.resample(frame) + convert.resample(None):
            for packet in stream.encode(part):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return out.getvalue()


def encode(kind: str, samples: np.ndarray, rate: int) -> bytes:
    """``samples`` in the container ``kind`` (a key of :data:`SOUNDFILE_WRITES` or :data:`PYAV_WRITES`)."""
    return write_pyav(kind, samples, rate) if kind in PYAV_WRITES else write_soundfile(kind, samples, rate)


def dominant_hz(samples: np.ndarray, rate: int) -> float:
    """Hz of the largest bin of a Hann-windowed spectrum of ``samples`` (bin width ``rate / len``)."""
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(samples.shape[0])))
    return float(np.argmax(spectrum)) * rate / samples.shape[0]


def rms(samples: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(samples, dtype=np.float64))))
