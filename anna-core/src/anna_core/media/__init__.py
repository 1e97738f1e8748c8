"""Fetching and decoding the media of vision-language requests (``image_url`` parts of OpenAI chat messages).

Threat model: a request names a URL, and the server fetches it. Without care that is a server-side request
forgery primitive (reach ``127.0.0.1``, the LAN, or the cloud metadata service at ``169.254.169.254``), a local
file disclosure (``file:///etc/passwd``, ``../`` or symlink escapes), and a resource-exhaustion vector (huge or
slow bodies, decompression bombs). This package therefore:

* accepts ``data:`` URIs, ``http``/``https`` URLs and — only when :attr:`MediaPolicy.allowed_local_media_path`
  is set — local files under that directory (checked after resolving symlinks);
* resolves each host once, refuses it unless *every* address is public (:mod:`.address`), and connects to
  exactly the checked address, so a second DNS answer cannot rebind the name (:mod:`.connection`); HTTPS
  certificates are still verified against the host *name*;
* re-checks every redirect hop, caps bytes per medium and per request (:mod:`.budget`), and enforces connect,
  read and total timeouts;
* checks an image's declared pixel count before decoding its pixels (:mod:`.decode`).

Every refusal raises :class:`anna_core.errors.InvalidRequestError` with ``param="messages"`` (HTTP 400).
"""

from anna_core.media.address import refusal_reason
from anna_core.media.budget import RequestBudget
from anna_core.media.decode import decode_image, decode_video
from anna_core.media.fetch import MediaFetcher, MediaSession
from anna_core.media.policy import MediaPolicy

__all__ = [
    "MediaFetcher",
    "MediaPolicy",
    "MediaSession",
    "RequestBudget",
    "decode_image",
    "decode_video",
    "refusal_reason",
]
