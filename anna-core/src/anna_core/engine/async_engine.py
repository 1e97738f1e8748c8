"""The asyncio face of the engine: one thread owns the model, handlers talk to it through queues.

Handlers call :meth:`AsyncEngine.generate`; the request goes into a command list guarded by a
``threading.Condition``; the engine thread wakes, adds it, steps, and hands the step's outputs to their
requests' ``asyncio.Queue`` s with one ``loop.call_soon_threadsafe`` per event loop and step (one wake-up
of the loop for all of a step's tokens, not one per request). An idle engine thread sleeps on the
condition (no polling), with a timeout when the engine says work becomes ready later
(:meth:`LLMEngine.next_wakeup`).

Backpressure: with ``max_waiting_requests`` set, :meth:`AsyncEngine.generate` refuses a request
while that many are queued (submitted but not running) with
:class:`~anna_core.errors.QueueFullError`, which the server turns into HTTP 429 + ``Retry-After``. Memory admission
(:mod:`anna_core.engine.memory_admission`) runs at the same door: a request that can never fit is refused with
:class:`~anna_core.errors.InvalidRequestError` (400), one that fits once running requests finish with
:class:`~anna_core.errors.MemoryUnavailableError` (503), before it reaches the engine thread. A degraded engine
(:mod:`anna_core.engine.faults`) refuses every request with :class:`~anna_core.errors.EngineDegradedError` (503)
and keeps its thread running, so ``/healthz`` still answers.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

from anna_core.engine.llm_engine import LLMEngine
from anna_core.engine.outputs import RequestOutput, Usage
from anna_core.engine.sampling_params import SamplingParams
from anna_core.errors import EngineDeadError, InvalidRequestError, QueueFullError
from anna_core.multimodal import MultiModalInputs

log = logging.getLogger("anna.engine")


class _Stream:
    """Where one request's outputs go: a queue on the caller's event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.queue: asyncio.Queue[RequestOutput] = asyncio.Queue()

    def put(self, output: RequestOutput) -> None:
        _hand_over(self.loop, [(self.queue, output)])


def _put_all(items: list[tuple[asyncio.Queue[RequestOutput], RequestOutput]]) -> None:
    for queue, output in items:
        queue.put_nowait(output)


def _hand_over(loop: asyncio.AbstractEventLoop, items: list[tuple[asyncio.Queue[RequestOutput], RequestOutput]]) -> None:
    """Put ``items`` into their queues on ``loop`` (one wake-up of the loop), from the engine thread."""
    try:
        loop.call_soon_threadsafe(_put_all, items)
    except RuntimeError:  # the caller's loop is closed; nobody is listening
        pass


class AsyncEngine:
    """Serves concurrent callers from one engine thread.

    Args:
        engine: the synchronous engine; after :meth:`start` only the engine thread touches it.
    """

    def __init__(self, engine: LLMEngine):
        self.engine = engine
        self._cond = threading.Condition()
        self._commands: list[tuple[str, Any]] = []
        self._streams: dict[str, _Stream] = {}
        self._thread: threading.Thread | None = None
        self._accepting = False
        self._stop = False
        self._drain = True
        self._dead: str | None = None
        self._stats: dict[str, Any] = engine.stats()
        self._started = time.perf_counter()

    @property
    def metrics(self) -> Any:
        """The engine's :class:`~anna_core.metrics.EngineMetrics` (safe to read from any thread)."""
        return self.engine.metrics

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the engine thread (idempotent)."""
        if self._thread is not None:
            return
        self._accepting = True
        self._thread = threading.Thread(target=self._run, name="anna-engine", daemon=True)
        self._thread.start()

    async def shutdown(self, drain: bool = True) -> None:
        """Stop accepting requests; with ``drain`` let in-flight ones finish, else abort them;
        then stop the engine thread."""
        with self._cond:
            self._accepting = False
            self._stop = True
            self._drain = drain
            self._cond.notify()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)

    @property
    def degraded(self) -> str | None:
        """Why the engine is degraded, or None (safe to read from any thread)."""
        return self.engine.degraded

    @property
    def is_running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self._accepting

    def stats(self) -> dict[str, Any]:
        """Latest engine counters: running, waiting, KV blocks and state slots used / total,
        tokens generated, uptime (seconds)."""
        with self._cond:
            stats = dict(self._stats)
        stats["uptime_s"] = time.perf_counter() - self._started
        stats["memory_admission"] = self.engine.admission.report()  # refusals happen off the engine thread
        return stats

    # -- requests -----------------------------------------------------------------------------

    def admit_group(self, jobs: list[tuple[str, list[int], SamplingParams]]) -> None:
        """Memory admission of one fan-out's requests together (all or none; thread-safe); then pass
        ``admitted=True`` to :meth:`generate` for each, and :meth:`release` them all if any is not generated.

        Raises:
            EngineDegradedError / InvalidRequestError / MemoryUnavailableError: as :meth:`generate`, for the group.
        """
        self.engine.admit_group(jobs)

    def release(self, request_ids: list[str]) -> None:
        """Drop the memory admission of ``request_ids`` (no-op for ids not held; thread-safe)."""
        for request_id in request_ids:
            self.engine.admission.release(request_id)

    async def generate(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams | None = None,
                       multimodal: MultiModalInputs | None = None, *,
                       admitted: bool = False) -> AsyncIterator[RequestOutput]:
        """Submit a request and yield its output after every step that changed it; the last one
        has ``finished`` set. Leaving the iteration early (break, cancel, disconnect) aborts it.
        ``multimodal``: its media and positions (:mod:`anna_core.multimodal`), or None.

        Raises:
            EngineDeadError: the engine is shutting down or has stopped.
            InvalidRequestError: the request exceeds a limit, or its id is in use.
            QueueFullError: ``max_waiting_requests`` requests are queued already (HTTP 429).
            MemoryUnavailableError: it fits the device's memory only once running requests finish (HTTP 503).
            EngineDegradedError: the engine is degraded (HTTP 503).
        """
        params = params or SamplingParams()
        try:
            # CPU work (grammar compilation above all): in a worker thread, so the event loop keeps serving.
            await asyncio.to_thread(self.engine.validate_request, list(prompt_token_ids), params, multimodal)
        except BaseException:
            if admitted:
                self.engine.admission.release(request_id)
            raise
        stream = _Stream(asyncio.get_running_loop())
        # memory admission (400 / 503) before it runs; outside the lock, as it may read the device's free memory
        if not admitted:
            self.engine.admit(request_id, list(prompt_token_ids), params)
        try:
            self._enqueue(request_id, stream, prompt_token_ids, params, multimodal)
        except BaseException:
            self.engine.admission.release(request_id)
            raise
        finished = False
        try:
            while True:
                output = await stream.queue.get()
                finished = output.finished
                yield output
                if finished:
                    return
        finally:
            if not finished:
                self.abort(request_id)

    def _enqueue(self, request_id: str, stream: _Stream, prompt_token_ids: list[int], params: SamplingParams,
                 multimodal: MultiModalInputs | None) -> None:
        """Hand an admitted request to the engine thread (the checks that need the lock first)."""
        with self._cond:
            if self._dead is not None:
                raise EngineDeadError(f"the engine stopped: {self._dead}")
            if not self._accepting:
                raise EngineDeadError("the engine is not accepting requests (not started or shutting down)")
            if request_id in self._streams:
                raise InvalidRequestError(f"request id {request_id!r} is already in use")
            limit = self.engine.config.max_waiting_requests
            queued = len(self._streams) - self._stats["running"]  # submitted, not running (last step's view)
            if limit and queued >= limit:
                self.engine.metrics.on_rejected_429()
                raise QueueFullError(f"the engine's waiting queue is full ({limit} requests); retry later",
                                     retry_after_s=self._stats.get("retry_after_s", 1))
            self._streams[request_id] = stream
            self._commands.append(("add", (request_id, list(prompt_token_ids), params, multimodal)))
            self._cond.notify()

    def abort(self, request_id: str) -> None:
        """Abort a request (no-op if unknown or finished). Safe from any thread."""
        with self._cond:
            if request_id in self._streams:
                self._commands.append(("abort", request_id))
                self._cond.notify()

    # -- the engine thread --------------------------------------------------------------------

    def _deliver(self, output: RequestOutput) -> None:
        self._deliver_all([output])

    def _deliver_all(self, outputs: list[RequestOutput]) -> None:
        """Hand ``outputs`` to their streams: one call into each caller's event loop."""
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Queue[RequestOutput], RequestOutput]]] = {}
        with self._cond:
            for output in outputs:
                stream = self._streams.get(output.request_id)
                if output.finished:
                    self._streams.pop(output.request_id, None)
                if stream is not None:
                    by_loop.setdefault(stream.loop, []).append((stream.queue, output))
        for loop, items in by_loop.items():
            _hand_over(loop, items)

    def _apply(self, commands: list[tuple[str, Any]]) -> None:
        for kind, arg in commands:
            if kind == "add":
                request_id, prompt, params, multimodal = arg
                try:
                    self.engine.add_request(request_id, prompt, params, enforce_queue_limit=False, validated=True,
                                            multimodal=multimodal, admitted=True)
                except Exception as exc:  # validated already; anything here is a failure of this request
                    self.engine.admission.release(request_id)
                    self._deliver(_error_output(request_id, prompt, f"{type(exc).__name__}: {exc}",
                                                code=getattr(exc, "code", None)))
            elif kind == "abort":
                output = self.engine.abort_request(arg)
                if output is not None:
                    self._deliver(output)

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    while not self._commands and not self._stop:
                        delay = self.engine.next_wakeup()
                        if delay is not None and delay <= 0:
                            break
                        self._cond.wait(delay)  # None: until notified
                    commands, self._commands = self._commands, []
                    stop, drain = self._stop, self._drain
                self._apply(commands)
                if stop and not drain:
                    for request_id in list(self._streams):
                        output = self.engine.abort_request(request_id)
                        if output is not None:
                            self._deliver(output)
                if stop and not self.engine.has_unfinished():
                    with self._cond:
                        if not self._commands:
                            break
                    continue
                outputs = self.engine.step()
                stats = self.engine.stats()
                with self._cond:
                    self._stats = stats
                if outputs:
                    self._deliver_all(outputs)
        except BaseException as exc:  # a bug in the loop itself: fail everyone, never hang them
            log.exception("engine thread died")
            with self._cond:
                self._dead = f"{type(exc).__name__}: {exc}"
                self._accepting = False
                streams, self._streams = self._streams, {}
            for request_id, stream in streams.items():
                stream.put(_error_output(request_id, [], f"engine failed: {self._dead}"))
        finally:
            with self._cond:
                self._accepting = False
                self._stats = self.engine.stats()
                leftover, self._streams = self._streams, {}
            for request_id, stream in leftover.items():
                stream.put(_error_output(request_id, [], "the engine stopped", reason="abort"))


def _error_output(request_id: str, prompt: list[int], message: str, reason: str = "error",
                  code: str | None = None) -> RequestOutput:
    return RequestOutput(request_id=request_id, prompt_token_ids=prompt, finished=True, finish_reason=reason,
                         error=message, usage=Usage(prompt_tokens=len(prompt)), error_code=code)
