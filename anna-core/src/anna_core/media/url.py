"""Which server an ``http(s)`` URL names, what to ask it for, and where a redirect may lead."""

import urllib.parse

import attrs

from anna_core.media.errors import refuse

DEFAULT_PORTS = {"http": 80, "https": 443}


@attrs.frozen
class HttpTarget:
    """The server an ``http(s)`` URL names.

    Attributes:
        scheme: ``"http"`` or ``"https"``.
        host: host name or address literal, lower-case, without brackets.
        port: TCP port, 1..65535.
    """

    scheme: str
    host: str
    port: int


def http_target(url: str) -> HttpTarget:
    """The scheme, host and port of an ``http(s)`` URL (default port 80 / 443).

    Raises:
        InvalidRequestError: another scheme, no host, or a port that is malformed, out of range or 0.
    """
    parsed = urllib.parse.urlsplit(url)
    scheme = parsed.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise refuse(f"URL scheme {scheme or '(none)'!r} is not allowed (http, https or data only)")
    host = parsed.hostname
    if not host:
        raise refuse("URL has no host")
    try:
        port = parsed.port
    except ValueError:
        raise refuse("URL has an invalid port") from None
    if port == 0:
        raise refuse("URL has an invalid port (0)")
    return HttpTarget(scheme, host, DEFAULT_PORTS[scheme] if port is None else port)


def redirect_target(url: str, status: int, location: str | None) -> str:
    """The absolute URL a redirect from ``url`` leads to.

    Args:
        url: the URL that answered with the redirect.
        status: its HTTP status (for the message).
        location: its ``Location`` header, possibly relative.

    Raises:
        InvalidRequestError: no ``Location``, or a redirect from ``https`` to plain ``http`` (a downgrade).
    """
    if not location or not location.strip():
        raise refuse(f"HTTP {status} redirect without a Location header")
    target = urllib.parse.urljoin(url, location.strip())
    if urllib.parse.urlsplit(url).scheme.lower() == "https" and urllib.parse.urlsplit(target).scheme.lower() == "http":
        raise refuse("redirect from https to plain http refused (downgrade)")
    return target


def request_target(url: str) -> str:
    """The path and query to send in the request line (``/`` for an empty path)."""
    parsed = urllib.parse.urlsplit(url)
    return (parsed.path or "/") + (f"?{parsed.query}" if parsed.query else "")
