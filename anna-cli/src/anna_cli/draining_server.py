"""``anna serve``'s shutdown on signals: uvicorn's server that drains before it exits.

The first SIGTERM / SIGINT drains (``/health`` and new ``/v1/*`` requests get 503, in-flight requests finish)
for at most ``--drain-timeout-s``, then ends the responses still in flight
(:mod:`anna_core.server.shutdown`); a second signal ends them at once; a third quits without waiting.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from types import FrameType
from typing import Any

import click

logger = logging.getLogger("anna.serve")

CUT_GRACE_S = 5.0
"""Seconds a response ended by the drain timeout or a forced stop gets to finish its last event; one still
running then (its client stopped reading, or it is still being prepared, e.g. a grammar compiling in a worker
thread, which nothing can interrupt) is left behind: the process exits at once (``os._exit``; 1 after a
forced stop, 0 after the drain timeout)."""


def draining_server_class() -> type:
    """The uvicorn server class of ``anna serve`` (uvicorn imported only when called)."""
    import uvicorn

    class DrainingServer(uvicorn.Server):
        """uvicorn, but the first SIGTERM/SIGINT drains (503 for new requests) before exiting, for at
        most ``drain_timeout_s``; a second one ends every response in flight at once (a final event
        for streams) and sets ``forced``; a third quits without waiting."""

        def __init__(self, config: uvicorn.Config, state: Any, on_listening: Any, drain_timeout_s: float):
            super().__init__(config)
            self.state = state
            self.on_listening = on_listening
            self.drain_timeout_s = drain_timeout_s
            self.forced = False
            self._drain_started = 0.0
            self._cut_at = 0.0

        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if self.started:  # the socket is bound: only now start the (slow) model load
                await self.on_listening()

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            # A signal handler: only flags here; on_tick (on the event loop) acts on them.
            name = signal.Signals(sig).name
            if not self.state.draining:
                self.state.draining = True
                self._drain_started = time.monotonic()
                logger.info("received %s: draining (%d request(s) in flight, at most %g s); no new requests "
                            "accepted", name, self.state.in_flight, self.drain_timeout_s)
            elif not self.forced:
                self.forced = True
                logger.warning("received %s again: ending the %d response(s) in flight and stopping",
                               name, self.state.in_flight)
            else:
                logger.warning("received %s a third time: quitting without waiting", name)
                self.should_exit = True
                self.force_exit = True

        async def on_tick(self, counter: int) -> bool:
            if self.state.draining and not self.state.streams.is_cut:
                if self.forced:
                    self.state.streams.cut("the server was stopped before this response finished")
                    self._cut_at = time.monotonic()
                elif time.monotonic() - self._drain_started > self.drain_timeout_s:
                    logger.warning("drain timeout (%g s, --drain-timeout-s) reached: ending the %d response(s) "
                                   "still in flight", self.drain_timeout_s, self.state.in_flight)
                    self.state.streams.cut("the server's drain timeout ended this response before it finished")
                    self._cut_at = time.monotonic()
            if (self.state.streams.is_cut and self.state.in_flight and not self.should_exit
                    and time.monotonic() - self._cut_at > CUT_GRACE_S):
                # a client that stopped reading, or a request still being prepared (a grammar compiling):
                # neither can be interrupted, so the process leaves them behind
                # (cancelling them would only log their tracebacks): exit now
                logger.warning("%d response(s) still running %g s after being ended (a client not reading, or a "
                               "request still being prepared); exiting without them", self.state.in_flight, CUT_GRACE_S)
                if self.forced:
                    click.echo("error: stopped by a second signal before every response finished", err=True)
                logging.shutdown()
                os._exit(1 if self.forced else 0)
            if self.state.draining and self.state.in_flight == 0 and not self.should_exit:
                logger.info("drained; shutting down")
                self.should_exit = True
            return await super().on_tick(counter)

    return DrainingServer
