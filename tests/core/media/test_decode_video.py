"""decode_video: frames sampled at the asked fps from a real encoded video; corrupt data refused."""

import io

import pytest
from anna_core.errors import InvalidRequestError
from anna_core.media import decode_video

av = pytest.importorskip("av")


def _video(num_frames: int, rate: int, size=(32, 24)) -> bytes:
    """An MPEG-4 video whose frame i is filled with grey level 10 * i."""
    import numpy as np

    buf = io.BytesIO()
    with av.open(buf, mode="w", format="mp4") as out:
        stream = out.add_stream("mpeg4", rate=rate)
        stream.width, stream.height, stream.pix_fmt = size[0], size[1], "yuv420p"
        stream.options = {"qscale": "1"}
        for i in range(num_frames):
            img = np.full((size[1], size[0], 3), 10 * i, dtype=np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return buf.getvalue()


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
