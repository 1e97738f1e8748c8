"""decode_video: frames sampled at the asked fps from a real encoded video; corrupt data refused."""

import io

import pytest
from anna_core.errors import InvalidRequestError
from anna_core.media import decode_video

av = pytest.importorskip("av")


def _video(num_frames: int, rate: int, size=(32, 24)) -> bytes:
    """An MPEG-4 video whose frame i is filled with grey level 10 * i."""
    import numpy as np
    from anna_core.testing.video import encode_mp4

    return encode_mp4([np.full((size[1], size[0], 3), 10 * i, dtype=np.uint8) for i in range(num_frames)], rate)


def test_samples_frames_at_fps_in_order():
    data = _video(20, rate=10)  # 2 s at 10 fps
    v = decode_video(data, fps=2.0, max_frames=100)
    assert len(v.frames) == 4
    assert v.frames[0].size == (32, 24) and v.frames[0].mode == "RGB"
    # frames at 0, 0.5, 1.0, 1.5 s: source frames 0, 5, 10, 15 -> grey 0, 50, 100, 150 (lossy codec: +- 6)
    greys = [v.frames[k].getpixel((16, 12))[0] for k in range(4)]
    assert all(abs(g - 50 * k) <= 6 for k, g in enumerate(greys)), greys


def test_frame_cap_and_pixel_cap():
    data = _video(20, rate=10)
    assert len(decode_video(data, fps=10.0, max_frames=3).frames) == 3
    with pytest.raises(InvalidRequestError, match="exceed"):
        decode_video(data, fps=1.0, max_frames=3, max_pixels=100)


def test_corrupt_video_is_a_400():
    with pytest.raises(InvalidRequestError, match="cannot decode video"):
        decode_video(b"\x00\x00\x00\x18ftypmp42" + b"garbage" * 50, fps=1.0, max_frames=4)


def _mjpeg(sizes_and_greys) -> bytes:
    """A raw MJPEG stream: concatenated JPEGs, each its own size; the header shows the first one's."""
    from PIL import Image

    parts = []
    for (w, h), grey in sizes_and_greys:
        buf = io.BytesIO()
        Image.new("RGB", (w, h), (grey, grey, grey)).save(buf, "JPEG")
        parts.append(buf.getvalue())
    return b"".join(parts)


def test_every_frame_size_is_checked_not_just_the_header():
    data = _mjpeg([((32, 24), 10)] * 6 + [((320, 240), 200)] * 3)
    with pytest.raises(InvalidRequestError, match="320x240 pixels exceed max_video_frame_pixels"):
        decode_video(data, fps=25.0, max_frames=100, max_pixels=2 * 32 * 24)
    v = decode_video(data, fps=25.0, max_frames=100, max_pixels=320 * 240)
    assert [f.size for f in v.frames] == [(32, 24)] * 6 + [(320, 240)] * 3


def test_default_pixel_cap_applies():
    data = _mjpeg([((32, 24), 10), ((4000, 2200), 10)])  # 8.8 M pixels, over the 4K default
    with pytest.raises(InvalidRequestError, match="4000x2200 pixels exceed max_video_frame_pixels"):
        decode_video(data, fps=25.0, max_frames=10)
    with pytest.raises(ValueError, match="max_pixels"):
        decode_video(data, fps=25.0, max_frames=10, max_pixels=None)


def test_decoded_frames_are_bounded_even_when_few_are_sampled():
    data = _mjpeg([((16, 16), 10)] * 30)  # 1.2 s at 25 fps; sampling at 0.5 fps keeps only the first
    with pytest.raises(InvalidRequestError, match=r"more than max_video_decoded_frames \(10\)"):
        decode_video(data, fps=0.5, max_frames=5, max_decoded_frames=10)
    assert len(decode_video(data, fps=0.5, max_frames=5, max_decoded_frames=30).frames) == 1


def test_declared_frame_count_refused_before_decoding():
    data = _video(20, rate=10)
    with pytest.raises(InvalidRequestError, match=r"declares 20 frames, over max_video_decoded_frames \(10\)"):
        decode_video(data, fps=1.0, max_frames=3, max_decoded_frames=10)
    assert len(decode_video(data, fps=10.0, max_frames=100, max_decoded_frames=20).frames) == 20


def test_decode_deadline_from_injected_clock():
    data = _video(20, rate=10)
    now = [0.0]

    def clock():
        now[0] += 1.0  # every look at the clock finds a second gone
        return now[0]

    with pytest.raises(InvalidRequestError, match=r"longer than video_decode_timeout_s \(5.0 s\)"):
        decode_video(data, fps=10.0, max_frames=100, timeout_s=5.0, clock=clock)
    assert 5.0 < now[0] < 10.0  # stopped soon after the deadline, not after all 20 frames
    assert len(decode_video(data, fps=10.0, max_frames=100, timeout_s=100.0, clock=clock).frames) == 20


def _offset_clip(fmt: str, num_frames: int = 90, rate: int = 30, start_s: int = 100) -> bytes:
    """A ``fmt`` clip at ``rate`` fps whose presentation times start at ``start_s`` seconds, not 0."""
    from fractions import Fraction

    import numpy as np

    buf = io.BytesIO()
    with av.open(buf, mode="w", format=fmt) as out:
        stream = out.add_stream("mpeg4", rate=rate)
        stream.width, stream.height, stream.pix_fmt = 32, 24, "yuv420p"
        stream.codec_context.time_base = Fraction(1, rate)
        for i in range(num_frames):
            frame = av.VideoFrame.from_ndarray(np.full((24, 32, 3), 2 * i, dtype=np.uint8), format="rgb24")
            frame.pts, frame.time_base = start_s * rate + i, Fraction(1, rate)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return buf.getvalue()


@pytest.mark.parametrize("fmt", ["mpegts", "matroska"])
def test_sampling_counts_from_the_first_frame_not_time_zero(fmt):
    data = _offset_clip(fmt)  # 3 s at 30 fps, presentation times 100.0 .. 102.97 s
    with av.open(io.BytesIO(data)) as c:  # the clip really is offset (else this test proves nothing)
        assert next(c.decode(video=0)).time > 99.0
    v = decode_video(data, fps=2.0, max_frames=1000)
    assert len(v.frames) == 6
    assert v.timestamps_s == pytest.approx([0.0, 0.5, 1.0, 1.5, 2.0, 2.5], abs=0.02)


def test_max_frame_pixels_downscales_each_kept_frame_keeping_aspect():
    data = _video(4, rate=10, size=(320, 240))
    v = decode_video(data, fps=10.0, max_frames=10, max_frame_pixels=80 * 60)
    assert len(v.frames) == 4
    for f in v.frames:
        w, h = f.size
        assert abs(w - 80) <= 1 and abs(h - 60) <= 1 and w * h <= 80 * 60 and f.mode == "RGB"
    assert [f.size for f in decode_video(data, fps=10.0, max_frames=10).frames] == [(320, 240)] * 4
    assert decode_video(data, fps=10.0, max_frames=1, max_frame_pixels=10**6).frames[0].size == (320, 240)
    with pytest.raises(ValueError, match="max_frame_pixels"):
        decode_video(data, fps=10.0, max_frames=1, max_frame_pixels=0)


def test_a_concat_playlist_or_sdp_as_a_video_is_refused_before_ffmpeg_opens_anything(tmp_path, monkeypatch):
    """FFmpeg picks its demuxer from the bytes; a concat playlist (``ffconcat``) read files relative to the working
    directory (past the fetcher's local-file refusal) and an SDP description opened UDP sockets (and blocked past
    the decode timeout). Only video demuxers run now."""
    import time

    from PIL import Image

    monkeypatch.chdir(tmp_path)
    (tmp_path / "uploads").mkdir()
    Image.new("RGB", (64, 48), (0, 1, 3)).save(tmp_path / "uploads" / "secret.jpg")
    sdp = b"v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=x\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=video 6502 RTP/AVP 96\r\n" \
          b"a=rtpmap:96 H264/90000\r\n"
    for data in (b"ffconcat version 1.0\nfile uploads/secret.jpg\n", sdp):
        start = time.monotonic()
        with pytest.raises(InvalidRequestError, match="cannot decode video"):
            decode_video(data, fps=1.0, max_frames=4, timeout_s=2.0)
        assert time.monotonic() - start < 2.0
    assert len(decode_video(_video(6, 10), fps=10.0, max_frames=8).frames) == 6  # an MP4 still decodes
