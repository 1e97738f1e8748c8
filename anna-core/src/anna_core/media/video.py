"""Decoding fetched bytes into video frames (PyAV), within pixel, frame-count and wall-clock bounds.

A video's header can lie: frames may grow after the first, or a short-looking file may hold millions of tiny
frames. Every decoded frame's size is therefore checked, decoding stops with a refusal after
``max_decoded_frames`` frames (sampled or not) or ``timeout_s`` seconds, and a header that declares more
frames than that is refused before decoding starts.
"""

import io
import math
import time
from collections.abc import Callable, Iterator

import attrs
from PIL import Image

from anna_core.media.errors import refuse
from anna_core.media.policy import VIDEO_DECODE_TIMEOUT_S, VIDEO_DECODED_FRAMES, VIDEO_FRAME_PIXELS, MediaPolicy

VIDEO_DEMUXERS = "mov,mp4,matroska,webm,avi,mpegts,mpeg,ogg,flv,asf,gif,mjpeg,h264,hevc,m4v"
"""The FFmpeg demuxers a video may be read by (MP4 / MOV, Matroska / WebM, AVI, MPEG-TS / -PS, Ogg, FLV, ASF, GIF,
and the raw MJPEG, H.264, HEVC and MPEG-4 streams: each reads only the bytes it is given), as FFmpeg's
``format_whitelist``: FFmpeg picks a demuxer from the bytes, and some open other inputs themselves — a concat playlist
(``ffconcat``) reads files relative to the server's working directory, an SDP description opens UDP sockets, HLS /
DASH fetch URLs — past the media fetcher's guards; outside the list a video is refused before anything opens."""


@attrs.frozen
class DecodedVideo:
    """Frames sampled from a video.

    Attributes:
        frames: RGB frames, in time order.
        source_fps: frames per second of the source stream (0.0 when unknown).
        duration_s: seconds, the source stream's duration (0.0 when unknown).
        timestamps_s: seconds, each frame's presentation time, measured from the stream's first frame.
    """

    frames: list[Image.Image]
    source_fps: float
    duration_s: float
    timestamps_s: list[float]


@attrs.frozen
class _Bounds:
    max_pixels: int
    max_decoded_frames: int
    expires_at: float
    timeout_s: float
    clock: Callable[[], float]

    def check_time(self) -> None:
        if self.clock() > self.expires_at:
            raise refuse(f"decoding the video took longer than video_decode_timeout_s ({self.timeout_s} s)")

    def check_size(self, width: int, height: int) -> None:
        if width * height > self.max_pixels:
            raise refuse(f"video frames of {width}x{height} pixels exceed max_video_frame_pixels "
                         f"({self.max_pixels})")


def decode_video(data: bytes, *, fps: float, max_frames: int, max_pixels: int = VIDEO_FRAME_PIXELS,
                 max_decoded_frames: int = VIDEO_DECODED_FRAMES, timeout_s: float = VIDEO_DECODE_TIMEOUT_S,
                 clock: Callable[[], float] = time.monotonic,
                 max_frame_pixels: int | None = None) -> DecodedVideo:
    """Frames sampled uniformly at ``fps`` from an encoded video, at most ``max_frames`` of them.

    The caps default to :class:`MediaPolicy`'s defaults; a server passes its policy's
    ``max_video_frame_pixels``, ``max_video_decoded_frames`` and ``video_decode_timeout_s``.

    Args:
        data: the encoded video (any container PyAV/FFmpeg reads).
        fps: frames per second to sample (the first frame at or after each ``k / fps`` seconds, counted
            from the first frame's presentation time, whatever the container's start time).
        max_frames: frames, cap on the result.
        max_pixels: pixels, cap on every decoded frame's width * height.
        max_decoded_frames: frames, cap on the frames decoded, sampled or skipped.
        timeout_s: seconds, wall-clock cap on the whole decode.
        clock: seconds, monotonic; for ``timeout_s``.
        max_frame_pixels: pixels; every kept frame larger than this (width * height) is downscaled, aspect
            kept, as soon as it is decoded, so full-size frames are never held. ``None``: frames keep their size.

    Raises:
        ValueError: ``fps``, ``max_frames`` or a cap not a positive number (``None`` included).
        InvalidRequestError: no video stream, corrupt data, a frame over ``max_pixels``, more frames than
            ``max_decoded_frames`` (declared or decoded), or decoding past ``timeout_s``.
    """
    limits = {"fps": fps, "max_frames": max_frames, "max_pixels": max_pixels,
              "max_decoded_frames": max_decoded_frames, "timeout_s": timeout_s}
    bad = {k: v for k, v in limits.items() if not (isinstance(v, int | float) and v > 0)}
    if bad:
        raise ValueError(f"decode_video limits must be positive, got {bad!r}")
    if max_frame_pixels is not None and not (isinstance(max_frame_pixels, int) and max_frame_pixels > 0):
        raise ValueError(f"decode_video max_frame_pixels must be a positive int or None, got {max_frame_pixels!r}")
    bounds = _Bounds(max_pixels, max_decoded_frames, clock() + timeout_s, timeout_s, clock)
    import av  # lazy: PyAV is heavy and only video requests need it

    frames: list[Image.Image] = []
    times: list[float] = []
    try:
        with av.open(io.BytesIO(data), mode="r", container_options={"format_whitelist": VIDEO_DEMUXERS}) as container:
            if not container.streams.video:
                raise refuse("cannot decode video: no video stream")
            stream = container.streams.video[0]
            bounds.check_size(stream.codec_context.width, stream.codec_context.height)
            if stream.frames > max_decoded_frames:
                raise refuse(f"video declares {stream.frames} frames, over max_video_decoded_frames "
                             f"({max_decoded_frames})")
            source_fps = float(stream.average_rate or stream.guessed_rate or 0.0)
            duration_s = float(stream.duration * stream.time_base) if stream.duration and stream.time_base else 0.0
            origin: float | None = None  # the first frame's presentation time: streams need not start at 0
            for index, frame in enumerate(_checked_frames(container, stream, bounds)):
                t = float(frame.time) if frame.time is not None else index / (source_fps or fps)
                if origin is None:
                    origin = t
                t -= origin
                if t + 1e-6 < len(frames) / fps:
                    continue
                frames.append(_shrunk(frame, max_frame_pixels).to_image().convert("RGB"))
                times.append(t)
                if len(frames) >= max_frames:
                    break
    except av.FFmpegError as e:
        raise refuse(f"cannot decode video: corrupt or unsupported data ({e})") from None
    if not frames:
        raise refuse("cannot decode video: no frames")
    if not duration_s:
        duration_s = times[-1]
    return DecodedVideo(frames, source_fps, duration_s, times)


def decode_video_for(data: bytes, sampling: tuple[float, int, int], policy: MediaPolicy, *,
                     fps: float | None = None, max_frames: int | None = None) -> DecodedVideo:
    """:func:`decode_video` as a model's processor samples and ``policy`` bounds it (the server's path, and
    ``anna generate --video``'s with the default policy).

    Args:
        data: the encoded video.
        sampling: the processor's ``video_sampling``, ``(fps, max_frames, max_frame_pixels)``.
        policy: the frame-size, decoded-frame and decode-time caps.
        fps: frames per second to sample instead of the processor's (checked by the caller).
        max_frames: frames to keep at most instead of the processor's (checked by the caller: never above it).

    Raises:
        InvalidRequestError: as :func:`decode_video`.
    """
    default_fps, default_frames, frame_pixels = sampling
    return decode_video(data, fps=default_fps if fps is None else fps,
                        max_frames=default_frames if max_frames is None else max_frames,
                        max_pixels=policy.max_video_frame_pixels, max_decoded_frames=policy.max_video_decoded_frames,
                        timeout_s=policy.video_decode_timeout_s, max_frame_pixels=frame_pixels)


def _shrunk(frame, max_frame_pixels: int | None):
    """``frame`` itself, or downscaled (aspect kept, bicubic) to at most ``max_frame_pixels`` pixels."""
    w, h = frame.width, frame.height
    if max_frame_pixels is None or w * h <= max_frame_pixels:
        return frame
    scale = math.sqrt(max_frame_pixels / (w * h))
    new_w, new_h = max(1, math.floor(w * scale + 1e-9)), max(1, math.floor(h * scale + 1e-9))
    return frame.reformat(width=new_w, height=new_h, format="rgb24", interpolation="BICUBIC")


def _checked_frames(container, stream, bounds: _Bounds) -> Iterator:
    """Every decoded frame of ``stream``, each checked against ``bounds`` (time before every packet too)."""
    decoded = 0
    for packet in container.demux(stream):
        bounds.check_time()
        for frame in packet.decode():
            decoded += 1
            if decoded > bounds.max_decoded_frames:
                raise refuse(f"video has more than max_video_decoded_frames ({bounds.max_decoded_frames}) frames")
            bounds.check_size(frame.width, frame.height)
            bounds.check_time()
            yield frame
