"""Decoding fetched bytes into images (Pillow) and video frames (PyAV)."""

import io

import attrs
from PIL import Image, UnidentifiedImageError

from anna_core.media.errors import refuse


def decode_image(data: bytes, max_pixels: int) -> Image.Image:
    """An RGB image from encoded bytes (PNG, JPEG, WebP, GIF first frame, ...).

    The declared size is checked against ``max_pixels`` after reading the header and before decoding pixels;
    Pillow's global ``MAX_IMAGE_PIXELS`` is left as it is.

    Args:
        data: the encoded image.
        max_pixels: pixels, cap on width * height.

    Raises:
        InvalidRequestError: not an image, unsupported format, corrupt or truncated data, or more than
            ``max_pixels`` pixels (a decompression bomb).
    """
    try:
        img = Image.open(io.BytesIO(data))
        width, height = img.size
        if width * height > max_pixels:
            raise refuse(f"image of {width}x{height} pixels exceeds max_image_pixels ({max_pixels}); "
                         "possible decompression bomb")
        img.load()
        return img.convert("RGB")
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
        raise refuse(f"image rejected as a decompression bomb ({e})") from None
    except UnidentifiedImageError:
        raise refuse("cannot decode image: unrecognized or unsupported format") from None
    except (OSError, ValueError, SyntaxError, EOFError, MemoryError) as e:
        raise refuse(f"cannot decode image: corrupt or truncated data ({e})") from None


@attrs.frozen
class DecodedVideo:
    """Frames sampled from a video.

    Attributes:
        frames: RGB frames, in time order.
        source_fps: frames per second of the source stream (0.0 when unknown).
        duration_s: seconds, the source stream's duration (0.0 when unknown).
        timestamps_s: seconds, each frame's presentation time.
    """

    frames: list[Image.Image]
    source_fps: float
    duration_s: float
    timestamps_s: list[float]


def decode_video(data: bytes, *, fps: float, max_frames: int, max_pixels: int | None = None) -> DecodedVideo:
    """Frames sampled uniformly at ``fps`` from an encoded video, at most ``max_frames`` of them.

    Args:
        data: the encoded video (any container PyAV/FFmpeg reads).
        fps: frames per second to sample (the first frame at or after each ``k / fps`` seconds).
        max_frames: frames, cap on the result.
        max_pixels: pixels, cap on one frame's width * height; ``None`` for none.

    Raises:
        ValueError: ``fps`` or ``max_frames`` not positive.
        InvalidRequestError: no video stream, corrupt data, or frames over ``max_pixels``.
    """
    if fps <= 0 or max_frames <= 0:
        raise ValueError(f"fps and max_frames must be positive, got fps={fps!r}, max_frames={max_frames!r}")
    import av  # lazy: PyAV is heavy and only video requests need it

    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if not container.streams.video:
                raise refuse("cannot decode video: no video stream")
            stream = container.streams.video[0]
            ctx = stream.codec_context
            if max_pixels is not None and ctx.width * ctx.height > max_pixels:
                raise refuse(f"video frames of {ctx.width}x{ctx.height} pixels exceed {max_pixels} pixels")
            source_fps = float(stream.average_rate or stream.guessed_rate or 0.0)
            duration_s = float(stream.duration * stream.time_base) if stream.duration and stream.time_base else 0.0
            frames: list[Image.Image] = []
            times: list[float] = []
            next_t = 0.0
            for frame in container.decode(stream):
                t = float(frame.time) if frame.time is not None else len(times) / (source_fps or fps)
                if t + 1e-6 < next_t:
                    continue
                frames.append(frame.to_image().convert("RGB"))
                times.append(t)
                if len(frames) >= max_frames:
                    break
                next_t = len(frames) / fps
    except av.FFmpegError as e:
        raise refuse(f"cannot decode video: corrupt or unsupported data ({e})") from None
    if not frames:
        raise refuse("cannot decode video: no frames")
    if not duration_s and times:
        duration_s = times[-1]
    return DecodedVideo(frames, source_fps, duration_s, times)
