"""Decoding fetched bytes into an image (Pillow), for the formats a client may send only.

Pillow can open dozens of formats; several parse complex, rarely exercised structures (PSD, FITS, TIFF, ...)
and EPS hands the file to Ghostscript. :func:`decode_image` lets Pillow try only :data:`ALLOWED_IMAGE_FORMATS`,
and names a refused format by its signature (Pillow's ``accept`` checks read only the first bytes; a format
without one, such as TGA, may be named after another format whose weak signature it matches).
"""

import io
import struct

from PIL import Image, UnidentifiedImageError

from anna_core.media.errors import refuse

ALLOWED_IMAGE_FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "BMP")
"""Pillow format names ``decode_image`` opens."""

_SIGNATURE_BYTES = 16


def decode_image(data: bytes, max_pixels: int, request_pixels_left: int | None = None) -> Image.Image:
    """An RGB image from encoded PNG, JPEG, WebP, GIF (first frame) or BMP bytes.

    The declared size is checked against ``max_pixels`` after reading the header and before decoding pixels;
    Pillow's global ``MAX_IMAGE_PIXELS`` is left as it is.

    Args:
        data: the encoded image.
        max_pixels: pixels, cap on width * height.
        request_pixels_left: pixels the request's other images left of ``max_request_image_pixels`` (None: no
            such cap).

    Raises:
        InvalidRequestError: another image format (named when recognised), not an image, corrupt or truncated
            data, more than ``max_pixels`` pixels (a decompression bomb), or more than ``request_pixels_left``.
    """
    try:
        img = Image.open(io.BytesIO(data), formats=ALLOWED_IMAGE_FORMATS)
        width, height = img.size
        if width * height > max_pixels:
            raise refuse(f"image of {width}x{height} pixels exceeds max_image_pixels ({max_pixels}); "
                         "possible decompression bomb")
        if request_pixels_left is not None and width * height > request_pixels_left:
            raise refuse(f"the request's images exceed max_request_image_pixels together (this {width}x{height} "
                         f"image, {request_pixels_left} pixels left)")
        img.load()
        return img.convert("RGB")
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
        raise refuse(f"image rejected as a decompression bomb ({e})") from None
    except UnidentifiedImageError:
        found = sniff_format(data)
        if found is not None:
            raise refuse(f"image format {found} is not allowed (allowed: {', '.join(ALLOWED_IMAGE_FORMATS)})") from None
        raise refuse("cannot decode image: unrecognized or unsupported format") from None
    except (OSError, ValueError, SyntaxError, EOFError, MemoryError) as e:
        raise refuse(f"cannot decode image: corrupt or truncated data ({e})") from None


def sniff_format(data: bytes) -> str | None:
    """The Pillow format whose signature ``data`` starts with, without parsing further; ``None`` if none."""
    Image.init()
    prefix = data[:_SIGNATURE_BYTES]
    for name in Image.ID:
        _factory, accept = Image.OPEN[name]
        try:
            if accept is not None and accept(prefix):
                return name
        except (ValueError, IndexError, TypeError, struct.error):  # too short for this signature
            continue
    return None
