"""decode_image: real pixels back, corrupt and bomb inputs refused."""

import io
import struct
import zlib

import pytest
from anna_core.errors import InvalidRequestError
from anna_core.media import decode_image
from PIL import Image


def _png_header_claiming(w, h) -> bytes:
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\0" * 16)) + chunk(b"IEND", b""))


def test_decodes_to_rgb_with_served_pixels():
    buf = io.BytesIO()
    Image.new("L", (5, 2), 77).save(buf, "PNG")
    img = decode_image(buf.getvalue(), 100)
    assert img.mode == "RGB" and img.size == (5, 2) and img.getpixel((4, 1)) == (77, 77, 77)


def test_bomb_header_refused_before_decoding():
    with pytest.raises(InvalidRequestError, match="decompression bomb"):
        decode_image(_png_header_claiming(100_000, 100_000), 64_000_000)


def test_low_max_pixels_refuses_large_image():
    buf = io.BytesIO()
    Image.new("RGB", (100, 100)).save(buf, "PNG")
    with pytest.raises(InvalidRequestError, match="decompression bomb") as e:
        decode_image(buf.getvalue(), 9_999)
    assert e.value.param == "messages"


@pytest.mark.parametrize("data", [b"not an image at all", b""])
def test_garbage_refused(data):
    with pytest.raises(InvalidRequestError, match="cannot decode image"):
        decode_image(data, 100)


def test_truncated_refused():
    buf = io.BytesIO()
    Image.effect_noise((64, 64), 50).convert("RGB").save(buf, "PNG")
    with pytest.raises(InvalidRequestError, match="cannot decode image"):
        decode_image(buf.getvalue()[: len(buf.getvalue()) // 2], 10_000)
