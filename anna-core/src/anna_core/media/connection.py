"""HTTP(S) connections pinned to one already-checked IP address and bounded by the fetch's deadline.

``http.client`` would resolve the host name again in ``connect()``; a DNS answer that changed in between (DNS
rebinding) would then bypass the address check. These classes connect to the checked IP through an injected
connector and keep the *name* for the ``Host`` header and for TLS certificate verification. The connect waits at
most ``min(connect_timeout_s, time left)``, the TLS handshake and every later send or receive at most
``min(read_timeout_s, time left)`` (:class:`~anna_core.media.deadline.DeadlineSocket`).
"""

import http.client
import socket
import ssl
from collections.abc import Callable

from anna_core.media.deadline import Deadline, DeadlineSocket

Connector = Callable[[str, int, float], socket.socket]
"""``(ip, port, connect_timeout_s) -> connected socket``."""

Resolver = Callable[[str, int], list[str]]
"""``(host, port) -> IP address strings``."""


def default_resolver(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (``socket.getaddrinfo``), in its order, without duplicates.

    Raises:
        OSError: resolution failed (``socket.gaierror``).
    """
    ips: list[str] = []
    for _family, _type, _proto, _canon, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        ip = str(sockaddr[0])
        if ip not in ips:
            ips.append(ip)
    return ips


def default_connector(ip: str, port: int, timeout: float) -> socket.socket:
    """``socket.create_connection((ip, port), timeout)``.

    Raises:
        OSError: the connection failed or timed out.
    """
    return socket.create_connection((ip, port), timeout)


class PinnedHTTPConnection(http.client.HTTPConnection):
    """An ``HTTPConnection`` to ``host:port`` whose socket goes to ``ip``.

    Args:
        host: the URL's host name (sent as ``Host``).
        port: TCP port.
        ip: the checked address to connect to.
        connector: opens the TCP connection.
        connect_timeout_s: seconds, cap on the connection.
        read_timeout_s: seconds, cap on each send or receive afterwards.
        deadline: the whole fetch's deadline, which bounds every step too.

    ``connect()`` raises ``InvalidRequestError`` once the deadline has passed, ``OSError`` as the connector.
    """

    def __init__(self, host: str, port: int, *, ip: str, connector: Connector, connect_timeout_s: float,
                 read_timeout_s: float, deadline: Deadline):
        super().__init__(host, port, timeout=read_timeout_s)
        self._pinned = (ip, connector, connect_timeout_s, read_timeout_s, deadline)

    def _open_pinned(self) -> socket.socket:
        ip, connector, connect_timeout_s, read_timeout_s, deadline = self._pinned
        sock = connector(ip, self.port, deadline.bound(connect_timeout_s))
        try:
            sock.settimeout(deadline.bound(read_timeout_s))
        except BaseException:
            sock.close()
            raise
        return sock

    def _bounded(self, sock: socket.socket) -> DeadlineSocket:
        _ip, _connector, _connect_timeout_s, read_timeout_s, deadline = self._pinned
        return DeadlineSocket(sock, deadline, read_timeout_s)

    def connect(self) -> None:
        self.sock = self._bounded(self._open_pinned())


class PinnedHTTPSConnection(http.client.HTTPSConnection):
    """An ``HTTPSConnection`` whose socket goes to ``ip``; the certificate is checked against ``host``.

    Args:
        ssl_context: wraps the socket (``server_hostname=host``); verification is its settings'.
        Others as :class:`PinnedHTTPConnection`.
    """

    def __init__(self, host: str, port: int, *, ip: str, connector: Connector, connect_timeout_s: float,
                 read_timeout_s: float, deadline: Deadline, ssl_context: ssl.SSLContext):
        super().__init__(host, port, timeout=read_timeout_s, context=ssl_context)
        self._pinned = (ip, connector, connect_timeout_s, read_timeout_s, deadline)
        self._media_ssl_context = ssl_context

    _open_pinned = PinnedHTTPConnection._open_pinned
    _bounded = PinnedHTTPConnection._bounded

    def connect(self) -> None:
        sock = self._open_pinned()
        try:  # the handshake as a whole waits at most the timeout _open_pinned set
            tls = self._media_ssl_context.wrap_socket(sock, server_hostname=self.host)
        except BaseException:
            sock.close()
            raise
        self.sock = self._bounded(tls)
