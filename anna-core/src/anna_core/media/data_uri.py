"""``data:`` URIs (RFC 2397)."""

import base64
import binascii
import urllib.parse

from anna_core.media.errors import refuse


def decode_data_uri(uri: str, max_bytes: int) -> bytes:
    """The bytes a ``data:[<mediatype>][;base64],<data>`` URI carries.

    Args:
        uri: the whole URI, starting with ``data:``.
        max_bytes: bytes, cap on the decoded payload.

    Raises:
        InvalidRequestError: no comma, bad base64, or a payload over ``max_bytes``.
    """
    header, sep, payload = uri[len("data:") :].partition(",")
    if not sep:
        raise refuse("malformed data: URI (no ',')")
    if header.lower().endswith(";base64"):
        payload = "".join(urllib.parse.unquote(payload).split())
        if len(payload) // 4 * 3 > max_bytes + 2:
            raise refuse(f"data: URI payload exceeds max_bytes_per_medium ({max_bytes} bytes)")
        try:
            data = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError) as e:
            raise refuse(f"invalid base64 in data: URI ({e})") from None
    else:
        data = urllib.parse.unquote_to_bytes(payload)
    if len(data) > max_bytes:
        raise refuse(f"data: URI payload exceeds max_bytes_per_medium ({max_bytes} bytes)")
    return data
