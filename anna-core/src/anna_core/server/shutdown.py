"""Ending the responses in flight when the server stops before they finish.

A drain (the first SIGTERM) lets running requests finish; when it runs past its deadline
(``anna serve --drain-timeout-s``), or on a forced stop (a second SIGTERM), the server calls
:meth:`StreamCutter.cut`. Every response waiting on the engine then ends at once, cleanly: a
stream sends a final SSE error event (``type`` ``server_error``, ``code`` ``server_shutdown``)
and ``data: [DONE]``, a non-streamed request gets a 503 in OpenAI's shape, and the unfinished
engine requests are aborted. Nothing is cancelled from outside, so nothing logs a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TypeVar

from anna_core.server.errors import ServiceUnavailableError

T = TypeVar("T")


class ServerStopping(ServiceUnavailableError):
    """The server stopped before this response finished (HTTP 503, or a final SSE error event)."""

    code = "server_shutdown"


class StreamCutter:
    """The server-wide signal that ends every response still in flight.

    Attributes:
        reason: why responses were cut (the message clients get), None until :meth:`cut`.
    """

    def __init__(self) -> None:
        self.reason: str | None = None
        self._event: asyncio.Event | None = None

    def _cut_event(self) -> asyncio.Event:
        if self._event is None:  # created on the serving loop, on first use
            self._event = asyncio.Event()
            if self.reason is not None:
                self._event.set()
        return self._event

    @property
    def is_cut(self) -> bool:
        return self.reason is not None

    def cut(self, reason: str) -> None:
        """End every response in flight now (call on the serving event loop); idempotent."""
        if self.reason is None:
            self.reason = reason
        if self._event is not None:
            self._event.set()

    async def until_cut(self, source: AsyncIterator[T]) -> AsyncIterator[T]:
        """Yield from ``source`` until it ends or :meth:`cut` is called.

        Raises:
            ServerStopping: the responses were cut (``source`` is closed first).
        """
        if self.reason is not None:
            raise ServerStopping(self.reason)
        iterator = source.__aiter__()
        waiter = asyncio.ensure_future(self._cut_event().wait())
        step: asyncio.Future[T] | None = None
        try:
            while True:
                step = asyncio.ensure_future(iterator.__anext__())  # type: ignore[arg-type]
                await asyncio.wait({step, waiter}, return_when=asyncio.FIRST_COMPLETED)
                if not step.done():
                    raise ServerStopping(self.reason or "the server is shutting down")
                try:
                    item = step.result()
                except StopAsyncIteration:
                    return
                yield item
        finally:
            waiter.cancel()
            if step is not None and not step.done():  # cut, or this generator itself was cancelled / closed
                step.cancel()  # the source sees CancelledError where it waits, and cleans up
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.gather(step, return_exceptions=True)
            aclose = getattr(iterator, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(RuntimeError):  # still running: its cancelled step closes it
                    await aclose()
