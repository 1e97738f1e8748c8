"""What media a server agrees to fetch, and how much of it."""

from pathlib import Path

import attrs

MiB = 1024 * 1024
VIDEO_FRAME_PIXELS = 3840 * 2160
"""Default cap on one video frame's pixels (4K UHD)."""
VIDEO_DECODED_FRAMES = 18_000
"""Default cap on the frames a video decode goes through (10 minutes at 30 fps)."""
VIDEO_DECODE_TIMEOUT_S = 60.0
"""Default seconds one video decode may take."""


def _positive(instance, attribute, value) -> None:
    if value <= 0:
        raise ValueError(f"MediaPolicy.{attribute.name} must be positive, got {value!r}")


def _non_negative(instance, attribute, value) -> None:
    if value < 0:
        raise ValueError(f"MediaPolicy.{attribute.name} must be >= 0, got {value!r}")


def _host_names(value) -> tuple[str, ...]:
    return tuple(str(h).strip().lower().rstrip(".") for h in value)


def _optional_path(value) -> Path | None:
    return None if value is None else Path(value)


@attrs.frozen
class MediaPolicy:
    """Limits on fetching media (images, video) named by requests.

    Attributes:
        allowed_media_domains: host names; when non-empty, only these hosts are fetched, and they may resolve to
            loopback, private or reserved addresses (an operator's own media server) — but not to link-local
            ones (the cloud metadata service ``169.254.169.254``), metadata, multicast or unspecified addresses.
        allow_private_media: fetch from any address, link-local included (trusted deployments only).
        allowed_local_media_path: directory under which ``file://`` URLs and bare paths may be read; ``None``
            refuses all local files.
        max_bytes_per_medium: bytes, cap on one medium's (decoded ``data:``, file or HTTP body) size.
        max_bytes_per_request: bytes, cap on all media of one request together.
        connect_timeout_s: seconds to resolve a host name, and seconds to establish one TCP connection.
        read_timeout_s: seconds the TLS handshake, sending the request, or a single socket read may wait.
        total_timeout_s: seconds for one medium's whole fetch — resolving, connecting, the request, status line,
            headers and body of every redirect hop; every wait is cut short when it runs out.
        max_redirects: redirects followed per medium.
        max_image_pixels: width * height above which an image is refused as a decompression bomb.
        max_request_image_pixels: width * height of all images of one request together (each is held decoded, as
            RGB, until the model's processor takes them: 64M pixels of a tiny PNG is about 190 MB).
        max_video_frame_pixels: width * height above which a video frame (any frame, not just the first) is
            refused.
        max_video_decoded_frames: frames, cap on how many frames decoding a video may go through, sampled or
            not (a video declaring more is refused before decoding).
        video_decode_timeout_s: seconds of wall-clock time decoding one video may take.
        max_media_per_request: media one request (one :class:`~anna_core.media.MediaSession`) may fetch.
        max_request_seconds: seconds all fetches of one request share, counted from the session's start; a
            fetch starting after it is refused and one running past it is cut.

    Raises:
        ValueError: a limit is not positive (``max_redirects`` may be 0).
    """

    allowed_media_domains: tuple[str, ...] = attrs.field(default=(), converter=_host_names)
    allow_private_media: bool = False
    allowed_local_media_path: Path | None = attrs.field(default=None, converter=_optional_path)
    max_bytes_per_medium: int = attrs.field(default=20 * MiB, validator=_positive)
    max_bytes_per_request: int = attrs.field(default=64 * MiB, validator=_positive)
    connect_timeout_s: float = attrs.field(default=5.0, validator=_positive)
    read_timeout_s: float = attrs.field(default=10.0, validator=_positive)
    total_timeout_s: float = attrs.field(default=30.0, validator=_positive)
    max_redirects: int = attrs.field(default=3, validator=_non_negative)
    max_image_pixels: int = attrs.field(default=64_000_000, validator=_positive)
    max_request_image_pixels: int = attrs.field(default=128_000_000, validator=_positive)
    max_video_frame_pixels: int = attrs.field(default=VIDEO_FRAME_PIXELS, validator=_positive)
    max_video_decoded_frames: int = attrs.field(default=VIDEO_DECODED_FRAMES, validator=_positive)
    video_decode_timeout_s: float = attrs.field(default=VIDEO_DECODE_TIMEOUT_S, validator=_positive)
    max_media_per_request: int = attrs.field(default=16, validator=_positive)
    max_request_seconds: float = attrs.field(default=60.0, validator=_positive)

    def host_is_listed(self, host: str) -> bool:
        """Whether ``host`` is one of ``allowed_media_domains``."""
        return host.lower().rstrip(".") in self.allowed_media_domains

    def host_is_allowed(self, host: str) -> bool:
        """Whether ``host`` may be fetched at all (any host when ``allowed_media_domains`` is empty)."""
        return not self.allowed_media_domains or host.lower().rstrip(".") in self.allowed_media_domains
