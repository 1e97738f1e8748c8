"""Fetching one medium's bytes from a ``data:`` URI, a local file, or HTTP(S).

An HTTP(S) fetch runs under one :class:`~anna_core.media.deadline.Deadline` of ``total_timeout_s``: it is checked
before every redirect hop and bounds the resolver, the connect, the TLS handshake, the request and every read.
A :class:`MediaSession` (one request) also caps its fetches' number and gives them one shared deadline of
``max_request_seconds``; each HTTP(S) fetch ends at the earlier of the two deadlines.
"""

import http.client
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable

import attrs

from anna_core.media.address import refusal_reason
from anna_core.media.budget import RequestBudget
from anna_core.media.connection import (
    Connector,
    PinnedHTTPConnection,
    PinnedHTTPSConnection,
    Resolver,
    default_connector,
    default_resolver,
)
from anna_core.media.data_uri import decode_data_uri
from anna_core.media.deadline import Deadline
from anna_core.media.errors import refuse
from anna_core.media.local import local_path_of, read_local_file
from anna_core.media.policy import MediaPolicy
from anna_core.media.resolve import MAX_PENDING_LOOKUPS, resolve_within
from anna_core.media.url import http_target, redirect_target, request_target

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_CHUNK = 64 * 1024


@attrs.define
class MediaFetcher:
    """Fetches media under a :class:`MediaPolicy`.

    Attributes:
        policy: the limits.
        resolver: ``(host, port) -> [ip, ...]``; default ``socket.getaddrinfo``. It runs in a daemon thread and
            is waited for at most ``min(connect_timeout_s, time left)`` seconds (:mod:`.resolve`).
        pending_lookups: the resolver threads running at once, abandoned ones included (default
            :data:`~anna_core.media.resolve.MAX_PENDING_LOOKUPS`); a fetch finding none free is a 429.
        connector: ``(ip, port, timeout_s) -> socket``; default ``socket.create_connection``. It is given
            ``min(connect_timeout_s, time left)`` and must honour it.
        ssl_context: wraps HTTPS sockets; default ``ssl.create_default_context()`` (verifies certificates).
        clock: seconds, monotonic; for ``total_timeout_s`` (socket waits are real seconds, cut to the time left
            on this clock).
    """

    policy: MediaPolicy
    resolver: Resolver = default_resolver
    pending_lookups: threading.Semaphore = attrs.field(factory=lambda: threading.BoundedSemaphore(MAX_PENDING_LOOKUPS))
    connector: Connector = default_connector
    ssl_context: ssl.SSLContext = attrs.field(factory=ssl.create_default_context)
    clock: Callable[[], float] = time.monotonic

    def session(self) -> "MediaSession":
        """A fetcher for one request: its media share ``policy.max_bytes_per_request``,
        ``policy.max_media_per_request`` and ``policy.max_request_seconds`` (counted from now)."""
        return MediaSession(self, RequestBudget(self.policy.max_bytes_per_request))

    def fetch(self, url: str, budget: RequestBudget | None = None, deadline: Deadline | None = None) -> bytes:
        """The bytes ``url`` names.

        Args:
            url: ``data:`` URI, ``http(s)://`` URL, ``file://`` URL or bare local path.
            budget: the request's shared byte budget, charged with the result; ``None`` for none.
            deadline: the request's shared deadline; an HTTP(S) fetch ends at the earlier of it and its own
                ``total_timeout_s``. ``None`` for none.

        Raises:
            InvalidRequestError: the URL is refused (scheme, address, local path, size, status, timeout,
                redirects, malformed) — always with a reason.
        """
        cap = self.policy.max_bytes_per_medium
        if budget is not None:
            cap = min(cap, budget.remaining_bytes)
        if not isinstance(url, str) or not url:
            raise refuse("empty media URL")
        try:
            scheme = urllib.parse.urlsplit(url).scheme.lower()
            if scheme == "data":
                data = decode_data_uri(url, cap)
            elif scheme in ("", "file"):
                data = read_local_file(local_path_of(url), self.policy.allowed_local_media_path, cap)
            else:
                data = self._fetch_http(url, cap, deadline)
        except (ValueError, UnicodeError) as e:  # a malformed URL ("http://[::1/x"), a non-ASCII request line
            raise refuse(f"malformed media URL ({type(e).__name__})") from None
        if budget is not None:
            budget.charge(len(data))
        return data

    def _fetch_http(self, url: str, cap: int, request_deadline: Deadline | None) -> bytes:
        deadline = Deadline(self.policy.total_timeout_s, self.clock).earliest(request_deadline)
        for _hop in range(self.policy.max_redirects + 1):
            if deadline.expired():
                raise deadline.refusal()
            conn = self._open(url, deadline)
            resp: http.client.HTTPResponse | None = None
            try:
                conn.request("GET", request_target(url), headers={"Accept": "*/*", "User-Agent": "anna"})
                resp = conn.getresponse()
                if resp.status in REDIRECT_STATUSES:
                    url = redirect_target(url, resp.status, resp.getheader("Location"))
                    continue
                if not 200 <= resp.status < 300:
                    raise refuse(f"fetching the medium returned HTTP {resp.status} {resp.reason}".rstrip())
                return _read_body(resp, cap)
            except TimeoutError:
                if deadline.expired():
                    raise deadline.refusal() from None
                raise refuse(f"fetching the medium timed out (read_timeout_s={self.policy.read_timeout_s}, "
                             f"connect_timeout_s={self.policy.connect_timeout_s})") from None
            except (OSError, http.client.HTTPException) as e:
                raise refuse(f"fetching the medium failed ({type(e).__name__}: {e})") from None
            finally:
                if resp is not None:  # a response that owns the socket ("Connection: close") is not conn's
                    resp.close()
                conn.close()
        raise refuse(f"too many redirects (max_redirects={self.policy.max_redirects})")

    def _open(self, url: str, deadline: Deadline) -> http.client.HTTPConnection:
        """A not-yet-connected connection to ``url``'s host, pinned to its checked address."""
        target = http_target(url)
        if not self.policy.host_is_allowed(target.host):
            raise refuse(f"host {target.host!r} is not in allowed_media_domains")
        ip = self._checked_address(target.host, target.port, deadline)
        kwargs = dict(ip=ip, connector=self.connector, connect_timeout_s=self.policy.connect_timeout_s,
                      read_timeout_s=self.policy.read_timeout_s, deadline=deadline)
        if target.scheme == "https":
            return PinnedHTTPSConnection(target.host, target.port, ssl_context=self.ssl_context, **kwargs)
        return PinnedHTTPConnection(target.host, target.port, **kwargs)

    def _checked_address(self, host: str, port: int, deadline: Deadline) -> str:
        """The address to connect to, after checking every address ``host`` resolves to."""
        ips = resolve_within(self.resolver, host, port, deadline.bound(self.policy.connect_timeout_s),
                             self.pending_lookups)
        private_ok = self.policy.host_is_listed(host)
        if not self.policy.allow_private_media:
            for ip in ips:
                reason = refusal_reason(ip, private_ok=private_ok)
                if reason is not None:
                    raise refuse(f"host {host!r} resolves to {ip}, a {reason}")
        return ips[0]


def _read_body(resp: http.client.HTTPResponse, cap: int) -> bytes:
    length = resp.getheader("Content-Length")
    if length is not None and length.strip().isdigit() and int(length) > cap:
        raise refuse(f"medium of {int(length)} bytes exceeds the byte limit ({cap} bytes)")
    chunks: list[bytes] = []
    size = 0
    while chunk := resp.read(_CHUNK):
        size += len(chunk)
        if size > cap:
            raise refuse(f"medium exceeds the byte limit ({cap} bytes)")
        chunks.append(chunk)
    return b"".join(chunks)


@attrs.define
class MediaSession:
    """One request's fetcher: its fetches share one :class:`RequestBudget`, a count and a deadline.

    Attributes:
        fetcher: does the fetching.
        budget: bytes left to the request.
        deadline: when the request's fetches must be done (``policy.max_request_seconds`` from the session's
            creation, on the fetcher's clock).
        fetches: fetches started so far.
    """

    fetcher: MediaFetcher
    budget: RequestBudget
    deadline: Deadline = attrs.field(default=attrs.Factory(
        lambda self: Deadline(self.fetcher.policy.max_request_seconds, self.fetcher.clock,
                              name="max_request_seconds"), takes_self=True))
    fetches: int = 0

    def fetch(self, url: str) -> bytes:
        """As :meth:`MediaFetcher.fetch`, charged to this request's budget, count and deadline.

        Raises:
            InvalidRequestError: as :meth:`MediaFetcher.fetch`; or this would be fetch number
                ``max_media_per_request + 1``, or the request's deadline has passed (before or during it).
        """
        limit = self.fetcher.policy.max_media_per_request
        if self.fetches >= limit:
            raise refuse(f"the request names more than max_media_per_request ({limit}) media")
        if self.deadline.expired():
            raise self.deadline.refusal()
        self.fetches += 1
        return self.fetcher.fetch(url, self.budget, self.deadline)
