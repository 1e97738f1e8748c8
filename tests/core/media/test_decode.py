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


def _encoded(fmt, mode="RGB", color=(200, 40, 90)) -> bytes:
    buf = io.BytesIO()
    Image.new(mode, (6, 5), color).save(buf, fmt)
    return buf.getvalue()


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP", "GIF", "BMP"])
def test_allowed_formats_decode(fmt):
    img = decode_image(_encoded(fmt, color=(200, 200, 200)), 100)
    assert img.size == (6, 5) and img.mode == "RGB"
    assert all(abs(c - 200) <= 3 for c in img.getpixel((3, 2))), img.getpixel((3, 2))


@pytest.mark.parametrize("fmt", ["TIFF", "EPS", "ICO", "PPM", "PCX", "SGI"])
def test_formats_outside_the_allow_list_refused_by_name(fmt):
    with pytest.raises(InvalidRequestError) as e:
        decode_image(_encoded(fmt), 100)
    assert f"image format {fmt} is not allowed" in str(e.value) and e.value.param == "messages"


@pytest.mark.parametrize("data,fmt", [
    (b"8BPS\x00\x01" + b"\x00" * 40, "PSD"),
    (b"SIMPLE  =                    T" + b" " * 50, "FITS"),
])
def test_unwritable_formats_refused_by_name_without_parsing(data, fmt):
    with pytest.raises(InvalidRequestError, match=f"image format {fmt} is not allowed"):
        decode_image(data, 100)


def test_format_without_signature_refused():
    # TGA has no magic bytes: Pillow would identify it by trying its parser, which decode_image never runs
    with pytest.raises(InvalidRequestError, match="is not allowed|unrecognized"):
        decode_image(_encoded("TGA"), 100)


def test_a_requests_images_share_a_pixel_budget():
    """Each image is held decoded until the processor takes it: a few tiny PNGs of 8000x8000 zeros were ~4 GB in
    one request; ``max_request_image_pixels`` bounds their pixels together."""
    from anna_core.media import MediaPolicy

    buf = io.BytesIO()
    Image.new("RGB", (100, 50)).save(buf, "PNG")
    data = buf.getvalue()
    policy = MediaPolicy(max_request_image_pixels=12_000)
    left = policy.max_request_image_pixels
    left -= decode_image(data, policy.max_image_pixels, left).width * 50
    left -= decode_image(data, policy.max_image_pixels, left).width * 50  # 10,000 of 12,000 used
    with pytest.raises(InvalidRequestError, match="exceed max_request_image_pixels together"):
        decode_image(data, policy.max_image_pixels, left)
    assert MediaPolicy().max_request_image_pixels == 128_000_000
