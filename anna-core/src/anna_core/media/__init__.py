"""Fetching and decoding the media of vision-language requests (``image_url`` parts of OpenAI chat messages).

Threat model: a request names a URL, and the server fetches it. Without care that is a server-side request
forgery primitive (reach ``127.0.0.1``, the LAN, or the cloud metadata service at ``169.254.169.254``), a local
file disclosure (``file:///etc/passwd``, ``../`` or symlink escapes), and a resource-exhaustion vector (huge or
slow bodies, decompression bombs). This package therefore:

* accepts ``data:`` URIs, ``http``/``https`` URLs and — only when :attr:`MediaPolicy.allowed_local_media_path`
  is set — local files under that directory (checked after resolving symlinks);
* resolves each host once (waiting at most ``connect_timeout_s``), refuses it unless *every* address is public
  — IPv4 addresses carried in IPv6 ones (IPv4-mapped, -translated and -compatible, 6to4, Teredo, NAT64)
  judged as themselves, special-purpose ranges listed explicitly (:mod:`.ranges`) — and connects
  to exactly the checked address, so a second DNS answer cannot rebind the name (:mod:`.address`,
  :mod:`.connection`); HTTPS certificates are still verified against the host *name*. Hosts listed in
  ``allowed_media_domains`` may be private, never link-local or a cloud metadata address unless
  ``allow_private_media``;
* re-checks every redirect hop and refuses an ``https`` → ``http`` downgrade and port 0 (:mod:`.url`), caps
  bytes per medium and per request (:mod:`.budget`) and media per request (``max_media_per_request``), and
  bounds the whole fetch — resolving, connecting, TLS, the request, status line, headers and body of every
  hop — by ``total_timeout_s`` and all of one request's fetches by ``max_request_seconds`` (:mod:`.deadline`);
* decodes only PNG, JPEG, WebP, GIF and BMP images, checking the declared pixel count before decoding pixels
  (:mod:`.image`), and bounds video decoding by every frame's pixels, the frames decoded and wall-clock time,
  optionally downscaling each kept frame as it is decoded (:mod:`.video`);
* reads local files through a non-blocking, no-follow open of the checked path, refusing NUL bytes, anything
  but a regular file and a file swapped after its check (:mod:`.local`).

Every refusal raises :class:`anna_core.errors.InvalidRequestError` with ``param="messages"`` (HTTP 400).
"""

from anna_core.media.address import refusal_reason
from anna_core.media.budget import RequestBudget
from anna_core.media.fetch import MediaFetcher, MediaSession
from anna_core.media.image import ALLOWED_IMAGE_FORMATS, decode_image
from anna_core.media.policy import MediaPolicy
from anna_core.media.video import DecodedVideo, decode_video, decode_video_for

__all__ = [
    "ALLOWED_IMAGE_FORMATS",
    "DecodedVideo",
    "MediaFetcher",
    "MediaPolicy",
    "MediaSession",
    "RequestBudget",
    "decode_image",
    "decode_video",
    "decode_video_for",
    "refusal_reason",
]
