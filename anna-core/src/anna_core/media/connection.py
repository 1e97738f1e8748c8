"""HTTP(S) connections pinned to one already-checked IP address.

``http.client`` would resolve the host name again in ``connect()``; a DNS answer that changed in between (DNS
rebinding) would then bypass the address check. These classes connect to the checked IP through an injected
connector and keep the *name* for the ``Host`` header and for TLS certificate verification.
"""

import http.client
import socket
import ssl
from collections.abc import Callable

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
        connect_timeout_s: seconds for the connection.
        read_timeout_s: seconds per socket read afterwards.
    """

    def __init__(self, host: str, port: int, *, ip: str, connector: Connector, connect_timeout_s: float,
                 read_timeout_s: float):
        super().__init__(host, port, timeout=read_timeout_s)
        self._pinned = (ip, connector, connect_timeout_s, read_timeout_s)

    def _open_pinned(self) -> socket.socket:
        ip, connector, connect_timeout_s, read_timeout_s = self._pinned
        sock = connector(ip, self.port, connect_timeout_s)
        sock.settimeout(read_timeout_s)
        return sock

    def connect(self) -> None:
        self.sock = self._open_pinned()


class PinnedHTTPSConnection(http.client.HTTPSConnection):
    """An ``HTTPSConnection`` whose socket goes to ``ip``; the certificate is checked against ``host``.

    Args:
        ssl_context: wraps the socket (``server_hostname=host``); verification is its settings'.
        Others as :class:`PinnedHTTPConnection`.
    """

    def __init__(self, host: str, port: int, *, ip: str, connector: Connector, connect_timeout_s: float,
                 read_timeout_s: float, ssl_context: ssl.SSLContext):
        super().__init__(host, port, timeout=read_timeout_s, context=ssl_context)
        self._pinned = (ip, connector, connect_timeout_s, read_timeout_s)
        self._media_ssl_context = ssl_context

    _open_pinned = PinnedHTTPConnection._open_pinned

    def connect(self) -> None:
        sock = self._open_pinned()
        try:
            self.sock = self._media_ssl_context.wrap_socket(sock, server_hostname=self.host)
        except BaseException:
            sock.close()
            raise
