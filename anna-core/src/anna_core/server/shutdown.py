"""Ending the responses in flight when the server stops before they finish.

A drain (the first SIGTERM) lets running requests finish; when it runs past its deadline
(``anna serve --drain-timeout-s``), or on a forced stop (a second SIGTERM), the server calls
:meth:`StreamCutter.cut`. Every response waiting on the engine then ends at once, cleanly: a
stream sends a final SSE error event (``type`` ``server_error``, ``code`` ``server_shutdown``)
and ``data: [DONE]``, a non-streamed request gets a 503 in OpenAI's shape, and the unfinished
engine requests are aborted. Nothing is cancelled from outside, so nothing logs a traceback.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from anna_core.server.errors import ServiceUnavailableError


class ServerStopping(ServiceUnavailableError):
    """The server stopped before this response finished (HTTP 503, or a final SSE error event)."""

    code = "server_shutdown"


class StreamCutter:
    """The server-wide signal that ends every response still in flight.

    A response registers what ends it with :meth:`watch` (the output stream of
    :func:`~anna_core.server.fanout.merged` puts the :class:`ServerStopping` into its queue, so its
    consumer raises it at the next item): nothing waits on the signal per output.

    Attributes:
        reason: why responses were cut (the message clients get), None until :meth:`cut`.
    """

    def __init__(self) -> None:
        self.reason: str | None = None
        self._watchers: set[Callable[[ServerStopping], None]] = set()

    @property
    def is_cut(self) -> bool:
        return self.reason is not None

    def cut(self, reason: str) -> None:
        """End every response in flight now (call on the serving event loop); idempotent."""
        if self.reason is None:
            self.reason = reason
        for on_cut in list(self._watchers):
            on_cut(ServerStopping(self.reason))

    @contextlib.contextmanager
    def watch(self, on_cut: Callable[[ServerStopping], None]) -> Iterator[None]:
        """Call ``on_cut`` (on the serving loop) if the responses are cut while inside this block.

        Raises:
            ServerStopping: the responses were cut already.
        """
        if self.reason is not None:
            raise ServerStopping(self.reason)
        self._watchers.add(on_cut)
        try:
            yield
        finally:
            self._watchers.discard(on_cut)
