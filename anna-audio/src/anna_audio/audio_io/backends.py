"""The two decoders, each as a stream header and an iterator of ``[n, C]`` float32 blocks at the source rate.

libsndfile (``soundfile``) reads WAV, FLAC, Ogg (Vorbis, Opus, FLAC) and MP3; FFmpeg (PyAV) reads MP4 / M4A,
WebM / Matroska and ADTS AAC. A decoder's own error (corrupt data, a codec it lacks) becomes the 400 of
:func:`~anna_audio.audio_io.errors.refuse`, naming the container and the decoder's words.
"""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Iterator

import attrs
import numpy as np

from anna_audio.audio_io.errors import refuse

BLOCK_S = 1.0
"""Seconds of source audio per block (bounds the memory a block holds at the source rate and channel count)."""


@attrs.frozen
class StreamHeader:
    """What a container says of its audio before any of it is decoded.

    Attributes:
        sample_rate: Hz.
        channels: channel count.
        declared_s: seconds, the duration the container states (None when it states none).
    """

    sample_rate: int
    channels: int
    declared_s: float | None


AUDIO_DEMUXERS = "mov,mp4,matroska,webm,aac,flac"
"""The FFmpeg demuxers an audio upload may be read by (MP4 / M4A, Matroska / WebM, ADTS AAC, FLAC), as FFmpeg's
``format_whitelist``: a demuxer that opens other inputs itself (a concat playlist reads local files, SDP opens
sockets) never runs on an upload."""

_UNKNOWN_FRAMES = (1 << 63) - 1
"""What libsndfile reports as the frame count of a stream of unknown length (``SF_COUNT_MAX``)."""


@contextlib.contextmanager
def soundfile_stream(data: bytes, fmt: str) -> Iterator[tuple[StreamHeader, Iterator[np.ndarray]]]:
    """Open ``data`` (a :data:`~anna_audio.audio_io.containers.FORMATS` key decoded by libsndfile) for reading.

    Yields:
        ``(header, blocks)``: blocks of up to :data:`BLOCK_S` seconds, ``[n, C]`` float32 in ``[-1, 1]``.

    Raises:
        InvalidRequestError: libsndfile cannot open or read the data.
    """
    import soundfile

    try:
        handle = soundfile.SoundFile(io.BytesIO(data))
    except (soundfile.LibsndfileError, RuntimeError, TypeError) as exc:
        raise refuse(f"cannot decode the {fmt} upload: corrupt or unsupported data ({_said(exc)})") from None
    if handle.frames >= _UNKNOWN_FRAMES:
        # libsndfile says SF_COUNT_MAX (2**63 - 1) for a stream whose header leaves its length unknown (a FLAC
        # written to a pipe: STREAMINFO's total samples 0), and then fails its reads' seeks: FFmpeg decodes it
        handle.close()
        with pyav_stream(data, fmt) as opened:
            yield opened
        return
    with handle:
        rate = int(handle.samplerate)
        declared = handle.frames / rate if handle.frames > 0 and rate > 0 else None
        header = StreamHeader(sample_rate=rate, channels=int(handle.channels), declared_s=declared)

        def blocks() -> Iterator[np.ndarray]:
            size = max(1, int(rate * BLOCK_S))
            while True:
                try:
                    block = handle.read(size, dtype="float32", always_2d=True)
                except (soundfile.LibsndfileError, RuntimeError, ValueError) as exc:
                    raise refuse(f"cannot decode the {fmt} upload: corrupt or truncated data ({_said(exc)})") from None
                if block.shape[0] == 0:
                    return
                yield block

        yield header, blocks()


@contextlib.contextmanager
def pyav_stream(data: bytes, fmt: str) -> Iterator[tuple[StreamHeader, Iterator[np.ndarray]]]:
    """Open ``data`` (a :data:`~anna_audio.audio_io.containers.FORMATS` key decoded by FFmpeg) for reading its first
    audio stream.

    Yields:
        ``(header, blocks)``: each decoded frame as ``[n, C]`` float32.

    Raises:
        InvalidRequestError: FFmpeg cannot open or decode the data, or it holds no audio stream.
    """
    import av

    try:
        container = av.open(io.BytesIO(data), mode="r", container_options={"format_whitelist": AUDIO_DEMUXERS})
    except (av.FFmpegError, ValueError) as exc:
        raise refuse(f"cannot decode the {fmt} upload: corrupt or unsupported data ({_said(exc)})") from None
    with container:
        if not container.streams.audio:
            raise refuse(f"the {fmt} upload holds no audio stream")
        stream = container.streams.audio[0]
        ctx = stream.codec_context
        if ctx is None:  # FFmpeg has no decoder for the stream's codec (or the header names none)
            raise refuse(f"the {fmt} upload's audio codec cannot be decoded")
        declared = None
        if stream.duration and stream.time_base:
            declared = float(stream.duration * stream.time_base)
        elif container.duration:
            declared = container.duration / av.time_base
        header = StreamHeader(sample_rate=int(ctx.sample_rate or 0), channels=int(ctx.channels or 0),
                              declared_s=declared)
        to_float = av.AudioResampler(format="fltp")  # planar float32, the frame's own layout and rate

        def blocks() -> Iterator[np.ndarray]:
            try:
                for frame in container.decode(stream):
                    for out in to_float.resample(frame):
                        yield out.to_ndarray().T  # [C, n] -> [n, C]
                for out in to_float.resample(None):
                    yield out.to_ndarray().T
            except (av.FFmpegError, ValueError) as exc:
                raise refuse(f"cannot decode the {fmt} upload: corrupt or truncated data ({_said(exc)})") from None

        yield header, blocks()


def _said(exc: BaseException) -> str:
    """The decoder's message, without the in-memory file object's repr it may quote."""
    text = re.sub(r"<_io\.BytesIO object at 0x[0-9a-fA-F]+>", "the upload", str(exc)).strip()
    return text[:200] or type(exc).__name__


OPENERS = {"soundfile": soundfile_stream, "pyav": pyav_stream}
"""Decoder name (:data:`~anna_audio.audio_io.containers.FORMATS` values) -> its opener."""
