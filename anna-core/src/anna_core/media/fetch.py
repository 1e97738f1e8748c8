"""Fetching one medium's bytes from a ``data:`` URI, a local file, or HTTP(S)."""

import http.client
import ssl
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
from anna_core.media.errors import refuse
from anna_core.media.local import local_path_of, read_local_file
from anna_core.media.policy import MediaPolicy

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_CHUNK = 64 * 1024


@attrs.define
class MediaFetcher:
    """Fetches media under a :class:`MediaPolicy`.

    Attributes:
        policy: the limits.
        resolver: ``(host, port) -> [ip, ...]``; default ``socket.getaddrinfo``.
        connector: ``(ip, port, timeout_s) -> socket``; default ``socket.create_connection``.
        ssl_context: wraps HTTPS sockets; default ``ssl.create_default_context()`` (verifies certificates).
        clock: seconds, monotonic; for the total timeout.
    """

    policy: MediaPolicy
    resolver: Resolver = default_resolver
    connector: Connector = default_connector
    ssl_context: ssl.SSLContext = attrs.field(factory=ssl.create_default_context)
    clock: Callable[[], float] = time.monotonic

    def session(self) -> "MediaSession":
        """A fetcher for one request: its media share ``policy.max_bytes_per_request``."""
        return MediaSession(self, RequestBudget(self.policy.max_bytes_per_request))

    def fetch(self, url: str, budget: RequestBudget | None = None) -> bytes:
        """The bytes ``url`` names.

        Args:
            url: ``data:`` URI, ``http(s)://`` URL, ``file://`` URL or bare local path.
            budget: the request's shared byte budget, charged with the result; ``None`` for none.

        Raises:
            InvalidRequestError: the URL is refused (scheme, address, local path, size, status, timeout,
                redirects, malformed) — always with a reason.
        """
        cap = self.policy.max_bytes_per_medium
        if budget is not None:
            cap = min(cap, budget.remaining_bytes)
        if not isinstance(url, str) or not url:
            raise refuse("empty media URL")
        scheme = urllib.parse.urlsplit(url).scheme.lower()
        if scheme == "data":
            data = decode_data_uri(url, cap)
        elif scheme in ("", "file"):
            data = read_local_file(local_path_of(url), self.policy.allowed_local_media_path, cap)
        else:
            data = self._fetch_http(url, cap)
        if budget is not None:
            budget.charge(len(data))
        return data

    def _fetch_http(self, url: str, cap: int) -> bytes:
        deadline = self.clock() + self.policy.total_timeout_s
        for _hop in range(self.policy.max_redirects + 1):
            conn = self._open(url)
            try:
                try:
                    conn.request("GET", _request_target(url), headers={"Accept": "*/*", "User-Agent": "anna"})
                    resp = conn.getresponse()
                    if resp.status in REDIRECT_STATUSES:
                        location = resp.getheader("Location")
                        if not location:
                            raise refuse(f"HTTP {resp.status} redirect without a Location header")
                        url = urllib.parse.urljoin(url, location.strip())
                        continue
                    if not 200 <= resp.status < 300:
                        raise refuse(f"fetching the medium returned HTTP {resp.status} {resp.reason}".rstrip())
                    return self._read_body(conn, resp, cap, deadline)
                except TimeoutError:
                    raise refuse("fetching the medium timed out") from None
                except (OSError, http.client.HTTPException) as e:
                    raise refuse(f"fetching the medium failed ({type(e).__name__}: {e})") from None
            finally:
                conn.close()
            if self.clock() > deadline:  # pragma: no cover - reached only when a redirect hop is slow
                raise refuse(f"fetching the medium timed out (total_timeout_s={self.policy.total_timeout_s})")
        raise refuse(f"too many redirects (max_redirects={self.policy.max_redirects})")

    def _open(self, url: str) -> http.client.HTTPConnection:
        """A not-yet-connected connection to ``url``'s host, pinned to its checked address."""
        parsed = urllib.parse.urlsplit(url)
        scheme = parsed.scheme.lower()
        if scheme not in ("http", "https"):
            raise refuse(f"URL scheme {scheme or '(none)'!r} is not allowed (http, https or data only)")
        host = parsed.hostname
        if not host:
            raise refuse("URL has no host")
        try:
            port = parsed.port or (443 if scheme == "https" else 80)
        except ValueError:
            raise refuse("URL has an invalid port") from None
        if not self.policy.host_is_allowed(host):
            raise refuse(f"host {host!r} is not in allowed_media_domains")
        ip = self._checked_address(host, port)
        kwargs = dict(ip=ip, connector=self.connector, connect_timeout_s=self.policy.connect_timeout_s,
                      read_timeout_s=self.policy.read_timeout_s)
        if scheme == "https":
            return PinnedHTTPSConnection(host, port, ssl_context=self.ssl_context, **kwargs)
        return PinnedHTTPConnection(host, port, **kwargs)

    def _checked_address(self, host: str, port: int) -> str:
        """The address to connect to, after checking every address ``host`` resolves to."""
        try:
            ips = list(self.resolver(host, port))
        except (OSError, UnicodeError) as e:
            raise refuse(f"cannot resolve host {host!r} ({e})") from None
        if not ips:
            raise refuse(f"host {host!r} resolves to no address")
        if not self.policy.host_is_trusted(host):
            for ip in ips:
                reason = refusal_reason(ip)
                if reason is not None:
                    raise refuse(f"host {host!r} resolves to {ip}, a {reason}")
        return ips[0]

    def _read_body(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse, cap: int,
                   deadline: float) -> bytes:
        length = resp.getheader("Content-Length")
        if length is not None and length.strip().isdigit() and int(length) > cap:
            raise refuse(f"medium of {int(length)} bytes exceeds the byte limit ({cap} bytes)")
        chunks: list[bytes] = []
        size = 0
        while True:
            remaining_s = deadline - self.clock()
            if remaining_s <= 0:
                raise refuse(f"fetching the medium timed out (total_timeout_s={self.policy.total_timeout_s})")
            if conn.sock is not None:
                conn.sock.settimeout(min(self.policy.read_timeout_s, remaining_s))
            chunk = resp.read(_CHUNK)
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > cap:
                raise refuse(f"medium exceeds the byte limit ({cap} bytes)")
            chunks.append(chunk)


def _request_target(url: str) -> str:
    parsed = urllib.parse.urlsplit(url)
    return (parsed.path or "/") + (f"?{parsed.query}" if parsed.query else "")


@attrs.define
class MediaSession:
    """One request's fetcher: every :meth:`fetch` charges the same :class:`RequestBudget`."""

    fetcher: MediaFetcher
    budget: RequestBudget

    def fetch(self, url: str) -> bytes:
        """As :meth:`MediaFetcher.fetch`, charged to this request's budget."""
        return self.fetcher.fetch(url, self.budget)
