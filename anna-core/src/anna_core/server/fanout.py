"""Run several engine requests of one HTTP request (``n`` choices, several prompts) as one stream.

:func:`open_all` submits every request and waits for each one's first output together, so an
engine refusal (a limit, a full queue, shutdown) reaches the client as an HTTP error status before
any response starts. :func:`merged` then yields ``(choice index, output)`` pairs as the engine
produces them (outputs that queued up for one choice joined into one); leaving it early (disconnect,
error, a server stop) aborts every unfinished request.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

from anna_core.engine.outputs import RequestOutput, coalesce
from anna_core.engine.sampling_params import SamplingParams
from anna_core.multimodal import MultiModalInputs
from anna_core.server.shutdown import StreamCutter

Opened = list[tuple[AsyncIterator[RequestOutput], RequestOutput | None]]


async def open_all(engine: Any, jobs: list[tuple[str, list[int], SamplingParams]],
                   multimodal: MultiModalInputs | Sequence[MultiModalInputs | None] | None = None) -> Opened:
    """Submit ``(request_id, prompt_ids, params)`` jobs (all with the media ``multimodal``, if any, or, given a
    sequence, each job with its own entry); returns each stream with its first output.

    Several jobs are admitted for memory as one group first (``engine.admit_group``, where the engine has it): a
    fan-out that can never fit together is a 400, not a 503 per choice forever, and on a refusal or any failure
    to open every sibling's admission is released at once.

    Raises:
        whatever the engine raised for the first failing job (all jobs are then closed).
    """
    group = len(jobs) > 1 and hasattr(engine, "admit_group")
    per_job = list(multimodal) if isinstance(multimodal, Sequence) else [multimodal] * len(jobs)
    if len(per_job) != len(jobs):
        raise ValueError(f"open_all: {len(per_job)} multimodal inputs for {len(jobs)} jobs")
    # an engine of a text task takes no multimodal argument
    media = [{} if mm is None else {"multimodal": mm} for mm in per_job]
    if group:
        engine.admit_group(jobs)
        streams = [engine.generate(rid, ids, params, admitted=True, **m) for (rid, ids, params), m in zip(jobs, media)]
    else:
        streams = [engine.generate(rid, ids, params, **m) for (rid, ids, params), m in zip(jobs, media)]

    async def first(stream: AsyncIterator[RequestOutput]) -> RequestOutput | None:
        try:
            return await stream.__anext__()
        except StopAsyncIteration:
            return None

    results = await asyncio.gather(*(first(s) for s in streams), return_exceptions=True)
    failure = next((r for r in results if isinstance(r, BaseException)), None)
    if failure is not None:
        for s in streams:
            with contextlib.suppress(Exception):
                await s.aclose()
        if group:  # streams closed before they started never reach their own release
            engine.release([rid for rid, _, _ in jobs])
        raise failure
    return list(zip(streams, results))  # type: ignore[arg-type]


async def merged(opened: Opened, cutter: StreamCutter | None = None) -> AsyncIterator[tuple[int, RequestOutput]]:
    """``(index, output)`` of all streams in arrival order, until every stream has finished.

    Outputs that queued up for the same stream while the consumer was busy (a loaded server) come as one,
    their deltas joined (:func:`~anna_core.engine.outputs.coalesce`): a client then gets one frame for
    several tokens instead of falling further behind. A failed output (``finish_reason == "error"``) or a
    stream's exception is never joined: everything that queued up before it is yielded first.

    Raises:
        ServerStopping: ``cutter`` cut the responses (the streams opened here are closed first; when the cut
            came before this response started, at once: the caller aborts its engine requests).
        whatever a stream raised.
    """
    queue: asyncio.Queue[tuple[int, RequestOutput | BaseException | None]] = asyncio.Queue()

    async def pump(i: int, stream: AsyncIterator[RequestOutput], first: RequestOutput | None) -> None:
        try:
            if first is not None:
                queue.put_nowait((i, first))
            async with contextlib.aclosing(stream):  # type: ignore[type-var]
                if first is None or not first.finished:
                    async for out in stream:
                        queue.put_nowait((i, out))
        except Exception as exc:  # noqa: BLE001 -- handed to the consumer, which re-raises it
            queue.put_nowait((i, exc))
        finally:
            queue.put_nowait((i, None))

    watch = cutter.watch(lambda exc: queue.put_nowait((-1, exc))) if cutter is not None else contextlib.nullcontext()
    with watch:
        tasks = [asyncio.ensure_future(pump(i, s, f)) for i, (s, f) in enumerate(opened)]
        remaining = len(tasks)
        try:
            while remaining:
                batch = [await queue.get()]
                while not queue.empty():
                    batch.append(queue.get_nowait())
                ready: dict[int, RequestOutput] = {}  # per stream, the outputs of this batch joined
                for i, item in batch:
                    if isinstance(item, BaseException) or (item is not None and item.finish_reason == "error"):
                        # what came before a failure goes out first, on its own (a failed output is never
                        # joined: the stream reports its error, not its text)
                        for j, out in ready.items():
                            yield j, out
                        ready.clear()
                        if isinstance(item, BaseException):
                            raise item
                        yield i, item
                    elif item is None:
                        remaining -= 1
                    else:
                        ready[i] = coalesce(ready[i], item) if i in ready else item
                for i, out in ready.items():
                    yield i, out
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
