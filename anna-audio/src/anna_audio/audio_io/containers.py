"""Which container an upload is, from its first bytes, and whether it is whole.

Sniffing reads magic numbers only: ``RIFF....WAVE`` (WAV), ``fLaC`` (FLAC), ``OggS`` (Ogg: Vorbis, Opus or FLAC),
``ID3`` or an MPEG audio frame header (MP3), ``....ftyp`` (MP4 / M4A), the EBML magic (WebM / Matroska) and an ADTS
frame header (raw AAC). Completeness is checked where the container states its own length: a WAV's RIFF size, and
an Ogg stream's pages (each page's length from its header; the last one flagged end-of-stream). The decoders check
the rest (:mod:`anna_audio.audio_io.backends`).
"""

from __future__ import annotations

import struct

from anna_audio.audio_io.errors import refuse

FORMATS: dict[str, str] = {
    "wav": "soundfile", "flac": "soundfile", "ogg": "soundfile", "mp3": "soundfile",
    "mp4": "pyav", "webm": "pyav", "aac": "pyav",
}
"""Every container decoded, and its decoder (``soundfile``: libsndfile; ``pyav``: FFmpeg). ``mp4`` covers M4A,
``webm`` covers Matroska, ``ogg`` covers Vorbis, Opus and FLAC in Ogg."""

_EBML = b"\x1a\x45\xdf\xa3"
_OGG_HEADER = 27  # bytes of an Ogg page header before its segment table
_OGG_EOS = 0x04  # header-type flag of a stream's last page
_RIFF_UNKNOWN = (0, 0xFFFFFFFF)  # RIFF sizes a streaming writer leaves when it cannot seek back


def sniff(data: bytes) -> str:
    """The container of ``data``: a key of :data:`FORMATS`.

    Raises:
        InvalidRequestError: empty data, or bytes that start no supported container (the message lists them).
    """
    if not data:
        raise refuse("the uploaded file is empty")
    head = data[:12]
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "wav"
    if head[:4] == b"fLaC":
        return "flac"
    if head[:4] == b"OggS":
        return "ogg"
    if head[4:8] == b"ftyp":
        return "mp4"
    if head[:4] == _EBML:
        return "webm"
    if head[:3] == b"ID3":
        return "mp3"
    if len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0:
        layer = (head[1] >> 1) & 0x03
        if layer == 0 and head[1] & 0xF0 == 0xF0:  # ADTS: 12 sync bits, layer 00
            return "aac"
        if layer != 0:  # MPEG-1/2/2.5 audio, layers I-III
            return "mp3"
    raise refuse(f"unrecognised audio container (supported: {', '.join(FORMATS)}); the first bytes are "
                 f"{data[:8].hex(' ')}")


def check_complete(fmt: str, data: bytes) -> None:
    """Refuse a WAV or Ogg upload that ends before its container says it does (other containers: no check here).

    Raises:
        InvalidRequestError: ``"truncated"``, with the byte counts.
    """
    if fmt == "wav":
        _check_wav(data)
    elif fmt == "ogg":
        _check_ogg(data)


def _check_wav(data: bytes) -> None:
    if len(data) < 12:
        raise refuse(f"truncated WAV: {len(data)} bytes, shorter than its header")
    (riff_size,) = struct.unpack_from("<I", data, 4)
    if riff_size not in _RIFF_UNKNOWN and len(data) < riff_size + 8:
        raise refuse(f"truncated WAV: {len(data)} bytes of the {riff_size + 8} its header declares")


def _check_ogg(data: bytes) -> None:
    """Walk the pages: each must be whole, and the last must carry the end-of-stream flag."""
    pos, flags = 0, 0
    while pos < len(data):
        if data[pos:pos + 4] != b"OggS" or pos + _OGG_HEADER > len(data):
            raise refuse(f"truncated or corrupt Ogg stream: no whole page header at byte {pos} of {len(data)}")
        flags, segments = data[pos + 5], data[pos + 26]
        table_end = pos + _OGG_HEADER + segments
        if table_end > len(data):
            raise refuse(f"truncated Ogg stream: a page's segment table ends past the {len(data)} bytes uploaded")
        pos = table_end + sum(data[pos + _OGG_HEADER:table_end])
        if pos > len(data):
            raise refuse(f"truncated Ogg stream: a page ends at byte {pos}, past the {len(data)} bytes uploaded")
    if not flags & _OGG_EOS:
        raise refuse("truncated Ogg stream: its last page is not marked end-of-stream")
