"""The total time one medium's fetch may take, and a socket that honours it on every operation.

A per-read timeout alone does not bound a fetch: a server that sends one byte shortly before each read
would time out can hold it for as long as it likes. Every blocking step — resolving, connecting, the TLS handshake, sending
the request, each ``recv`` of the status line, headers and body, on every redirect hop — therefore waits at most
``min(its own timeout, time left until the deadline)``, and none starts once the deadline has passed.
"""

import io
import socket
from collections.abc import Callable

from anna_core.errors import InvalidRequestError
from anna_core.media.errors import refuse


class Deadline:
    """A point in time, on ``clock``, by which a fetch must be done.

    Args:
        limit_s: seconds from now (``MediaPolicy.total_timeout_s``).
        clock: seconds, monotonic.
        name: the policy field ``limit_s`` comes from, named in the refusal.
    """

    def __init__(self, limit_s: float, clock: Callable[[], float], *, name: str = "total_timeout_s"):
        self.limit_s = limit_s
        self.clock = clock
        self.name = name
        self.expires_at = clock() + limit_s

    def earliest(self, other: "Deadline | None") -> "Deadline":
        """Whichever of this deadline and ``other`` (``None``: none) passes first."""
        if other is not None and other.expires_at < self.expires_at:
            return other
        return self

    def remaining_s(self) -> float:
        """Seconds left (negative once passed)."""
        return self.expires_at - self.clock()

    def expired(self) -> bool:
        """Whether the deadline has passed."""
        return self.remaining_s() <= 0

    def refusal(self) -> InvalidRequestError:
        """The 400 error for a fetch that ran out of time (the caller raises it)."""
        return refuse(f"fetching the medium timed out ({self.name}={self.limit_s})")

    def bound(self, timeout_s: float) -> float:
        """Seconds the next blocking step may wait: ``min(timeout_s, remaining_s())``.

        Raises:
            InvalidRequestError: the deadline has passed.
        """
        remaining = self.remaining_s()
        if remaining <= 0:
            raise self.refusal()
        return min(timeout_s, remaining)


class DeadlineSocket:
    """The parts of a socket ``http.client`` uses, each call bounded by ``deadline`` and ``timeout_s``.

    Args:
        sock: a connected (possibly TLS-wrapped) socket; closed by :meth:`close` once no reader holds it.
        deadline: the fetch's deadline.
        timeout_s: seconds, cap on any single send or receive (``MediaPolicy.read_timeout_s``).
    """

    def __init__(self, sock: socket.socket, deadline: Deadline, timeout_s: float):
        self._sock = sock
        self._deadline = deadline
        self._timeout_s = timeout_s

    def arm(self) -> None:
        """Set the socket's timeout for the next operation.

        Raises:
            InvalidRequestError: the deadline has passed.
        """
        self._sock.settimeout(self._deadline.bound(self._timeout_s))

    def sendall(self, data: bytes) -> None:
        """``socket.sendall`` within the bound (the whole call, not each chunk).

        Raises:
            InvalidRequestError: the deadline has passed. OSError / TimeoutError: as ``socket.sendall``.
        """
        self.arm()
        self._sock.sendall(data)

    def makefile(self, mode: str = "rb") -> io.BufferedReader:
        """A buffered binary reader whose every ``recv`` is bounded (only ``"rb"`` is supported).

        Raises:
            ValueError: another mode.
        """
        if mode != "rb":
            raise ValueError(f"DeadlineSocket.makefile supports mode 'rb' only, got {mode!r}")
        return io.BufferedReader(_BoundedReader(self, self._sock.makefile("rb", buffering=0)))

    def close(self) -> None:
        """Close the socket (the OS socket stays open while a reader from :meth:`makefile` is open)."""
        self._sock.close()


class _BoundedReader(io.RawIOBase):
    """Raw reads from ``raw`` (a socket's unbuffered reader), each armed by ``owner`` first."""

    def __init__(self, owner: DeadlineSocket, raw: io.RawIOBase):
        self._owner = owner
        self._raw = raw

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int | None:
        self._owner.arm()
        return self._raw.readinto(buffer)

    def close(self) -> None:
        self._raw.close()
        super().close()
