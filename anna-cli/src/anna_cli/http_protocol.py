"""uvicorn's HTTP/1.1 protocol (h11) with the read deadlines and connection limit of ``anna serve``.

uvicorn times out only an idle keep-alive connection (``timeout_keep_alive``, restarted by every
byte that arrives), so a client that never finishes its request -- one that opens a connection and
sends nothing, or trickles a header line every few seconds, or a body byte by byte -- holds a
connection for ever. :func:`protocol_class` adds, per connection:

- a **header deadline**: the request line and headers must be complete within ``header_timeout_s``
  of the connection opening (or of the previous response ending, on a kept-alive connection),
  however the bytes trickle in; else the server answers 408 and closes the connection;
- a **body deadline**: once the headers are in, the whole body must arrive within
  ``body_timeout_s``; else the connection is closed (the handler sees a disconnect);
- a **connection limit**: beyond ``max_connections`` open connections, a new one gets a 503 in
  OpenAI's error shape (uvicorn's own ``limit_concurrency`` answers in plain text) and is closed.

Responses are not timed: a long stream is fine once its request has arrived.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import h11
from anna_core.server.errors import error_body
from uvicorn.protocols.http.h11_impl import H11Protocol

_HEAD_PENDING = (h11.IDLE,)  # their state until the request line and headers are complete


def raw_error_response(status: int, reason: str, message: str, type_: str, code: str) -> bytes:
    """A whole HTTP/1.1 error response (OpenAI-shaped JSON body, ``Connection: close``) as bytes, for
    connections that have no request cycle to answer through."""
    body = json.dumps(error_body(message, type_, None, code)).encode()
    head = (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n").encode()
    return head + body


class GuardedH11Protocol(H11Protocol):
    """:class:`H11Protocol` with a header deadline, a body deadline and a connection limit (the
    class attributes; :func:`protocol_class` makes a subclass with chosen values)."""

    header_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    max_connections: int = 0  # 0: no limit

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._read_deadline: asyncio.TimerHandle | None = None
        self._reading_body = False

    def _arm(self, delay: float, callback: Any) -> None:
        self._disarm()
        if delay > 0:
            self._read_deadline = self.loop.call_later(delay, callback)

    def _disarm(self) -> None:
        if self._read_deadline is not None:
            self._read_deadline.cancel()
            self._read_deadline = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if self.max_connections and len(self.connections) > self.max_connections:
            self.logger.warning("refused a connection: %d connections are open (--max-connections %d)",
                                len(self.connections) - 1, self.max_connections)
            transport.write(raw_error_response(
                503, "Service Unavailable", f"the server has {self.max_connections} connections open, its limit; "
                "retry later", "server_error", "service_unavailable"))
            transport.close()
            return
        self._arm(self.header_timeout_s, self._header_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        if self.transport.is_closing():
            self._disarm()
            return
        state = self.conn.their_state
        if state is h11.SEND_BODY:
            if not self._reading_body:  # the head is in: time the body from here
                self._reading_body = True
                self._arm(self.body_timeout_s, self._body_timed_out)
        elif state not in _HEAD_PENDING:  # the whole request is in (or the connection is done)
            self._reading_body = False
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state in _HEAD_PENDING:
            self._reading_body = False
            self._arm(self.header_timeout_s, self._header_timed_out)  # the next request's head

    def _header_timed_out(self) -> None:
        self._read_deadline = None
        if self.transport.is_closing() or self.conn.their_state not in _HEAD_PENDING:
            return
        if self.cycle is not None and not self.cycle.response_complete:
            return  # a pipelined request is being answered; its end re-arms the deadline
        self.logger.info("closed a connection whose request headers did not arrive within %g s "
                         "(--header-timeout-s)", self.header_timeout_s)
        self.transport.write(raw_error_response(
            408, "Request Timeout", f"the request headers did not arrive within {self.header_timeout_s:g} s",
            "invalid_request_error", "request_timeout"))
        self.transport.close()

    def _body_timed_out(self) -> None:
        self._read_deadline = None
        if self.transport.is_closing() or self.conn.their_state is not h11.SEND_BODY:
            return
        self.logger.info("closed a connection whose request body did not arrive within %g s (--body-timeout-s)",
                         self.body_timeout_s)
        self.transport.close()


def protocol_class(*, header_timeout_s: float, body_timeout_s: float, max_connections: int) -> type[H11Protocol]:
    """A :class:`GuardedH11Protocol` subclass with these limits, for ``uvicorn.Config(http=...)``.

    Args:
        header_timeout_s: seconds for the request line and headers (0: no deadline).
        body_timeout_s: seconds for the body once the headers are in (0: no deadline).
        max_connections: open connections beyond which new ones get a 503 (0: no limit).
    """
    return type("AnnaH11Protocol", (GuardedH11Protocol,), {
        "header_timeout_s": header_timeout_s, "body_timeout_s": body_timeout_s, "max_connections": max_connections})
