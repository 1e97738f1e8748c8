"""The output fan-in of one HTTP request (:func:`anna_core.server.fanout.merged`): outputs that queued up
while the consumer was busy come joined, a server stop ends the stream at once, and the engine's
outputs of one step reach every stream with one wake-up of the loop."""

from __future__ import annotations

import asyncio

import pytest
from anna_core.engine.outputs import RequestOutput, TokenLogprob, coalesce
from anna_core.server.fanout import merged
from anna_core.server.shutdown import ServerStopping, StreamCutter


def _out(rid: str, ids: list[int], new: list[int], *, finished: bool = False) -> RequestOutput:
    return RequestOutput(request_id=rid, prompt_token_ids=[1], text="".join(f"<{t}>" for t in ids), token_ids=ids,
                         delta_text="".join(f"<{t}>" for t in new), delta_token_ids=new, finished=finished,
                         finish_reason="length" if finished else None,
                         logprobs=[TokenLogprob(t, -0.5 * t) for t in new])


def test_coalesce_joins_the_deltas_and_keeps_the_later_state():
    a, b = _out("r", [5], [5]), _out("r", [5, 6, 7], [6, 7], finished=True)
    c = coalesce(a, b)
    assert (c.delta_text, c.delta_token_ids, c.text, c.token_ids) == ("<5><6><7>", [5, 6, 7], "<5><6><7>", [5, 6, 7])
    assert [e.token_id for e in c.logprobs] == [5, 6, 7] and c.finished and c.finish_reason == "length"


class _Script:
    """An engine stream: yields its outputs when the test releases them."""

    def __init__(self, outputs):
        self.outputs = list(outputs)
        self.queue: asyncio.Queue = asyncio.Queue()
        self.closed = False

    def __aiter__(self):
        return self

    async def __anext__(self):
        item = await self.queue.get()
        if item is None:
            raise StopAsyncIteration
        return item

    async def aclose(self):
        self.closed = True

    def release(self, n: int) -> None:
        for _ in range(n):
            self.queue.put_nowait(self.outputs.pop(0) if self.outputs else None)


def test_outputs_that_queued_up_come_as_one_per_choice():
    async def run():
        a = _Script([_out("a", [1, 2], [2]), _out("a", [1, 2, 3], [3]), _out("a", [1, 2, 3, 4], [4], finished=True)])
        b = _Script([_out("b", [9, 8], [8], finished=True)])
        got = []
        stream = merged([(a, _out("a", [1], [1])), (b, _out("b", [9], [9]))])
        got.append(await stream.__anext__())  # the first outputs, one per choice
        got.append(await stream.__anext__())
        a.release(4)  # three outputs of "a" and one of "b" (then their ends) queue up while the consumer is away
        b.release(2)
        await asyncio.sleep(0)
        async for item in stream:
            got.append(item)
        return got, a.closed and b.closed

    got, closed = asyncio.run(run())
    assert [(i, o.delta_token_ids) for i, o in got] == [(0, [1]), (1, [9]), (0, [2, 3, 4]), (1, [8])]
    assert got[2][1].finished and got[2][1].token_ids == [1, 2, 3, 4] and closed


def test_a_cut_ends_the_stream_at_once_and_closes_the_engine_streams():
    async def run():
        cutter = StreamCutter()
        a = _Script([])
        stream = merged([(a, _out("a", [1], [1]))], cutter)
        assert (await stream.__anext__())[1].delta_token_ids == [1]
        waiting = asyncio.ensure_future(stream.__anext__())
        await asyncio.sleep(0.01)
        assert not waiting.done()
        cutter.cut("stopped")
        with pytest.raises(ServerStopping, match="stopped"):
            await asyncio.wait_for(waiting, 1)
        await stream.aclose()
        with pytest.raises(ServerStopping):  # a response that starts after the cut fails at once
            await merged([(a, None)], cutter).__anext__()
        return a.closed

    assert asyncio.run(run())


def test_one_step_reaches_every_stream_with_one_wake_up():
    from anna_core.engine.async_engine import AsyncEngine, _Stream

    class Loop:  # records what the engine thread hands to the caller's event loop
        def __init__(self):
            self.calls = []

        def call_soon_threadsafe(self, fn, *args):
            self.calls.append((fn, args))

    class Engine:
        metrics = None

        def stats(self):
            return {"running": 0}

    async def streams(loop):
        return {rid: _Stream(loop) for rid in ("a", "b", "c")}

    loop = Loop()
    engine = AsyncEngine(Engine())
    engine._streams = asyncio.run(streams(loop))
    queues = {rid: s.queue for rid, s in engine._streams.items()}
    engine._deliver_all([_out("a", [1], [1]), _out("b", [2], [2], finished=True), _out("c", [3], [3])])
    assert len(loop.calls) == 1
    fn, (items,) = loop.calls[0]
    assert [(q is queues[o.request_id], o.request_id) for q, o in items] == [(True, "a"), (True, "b"), (True, "c")]
    assert set(engine._streams) == {"a", "c"}  # a finished request's stream is dropped
    fn(items)
    assert [queues[r].get_nowait().delta_token_ids for r in "abc"] == [[1], [2], [3]]


def _error(rid: str, ids: list[int]) -> RequestOutput:
    return RequestOutput(request_id=rid, prompt_token_ids=[1], text="".join(f"<{t}>" for t in ids), token_ids=ids,
                         finished=True, finish_reason="error", error="step failed")


def test_what_queued_up_before_a_failure_still_reaches_the_stream():
    """A failed output is never joined with the tokens before it: the stream would report only the error
    (found in review)."""
    from anna_core.server import routes_openai

    class Run:  # the part of routes_openai._Run that _stream uses
        def __init__(self, opened):
            self.opened = opened

        async def outputs(self):
            async for i, out in merged(self.opened):
                yield i, out

        async def abort_unfinished(self):
            pass

    async def run():
        a = _Script([_out("a", [1, 2], [2]), _error("a", [1, 2])])
        a.release(3)
        await asyncio.sleep(0)
        seen, frames = [], []

        def on_output(i, out):
            seen.append(out.delta_text)
            return [[{"text": out.delta_text}]]

        async for f in routes_openai._stream(Run([(a, _out("a", [1], [1]))]), [], on_output,
                                             lambda c: repr(c).encode(), None):
            frames.append(f)
        return seen, frames

    seen, frames = asyncio.run(run())
    assert "".join(seen) == "<1><2>" and b"step failed" in frames[-2] and frames[-1] == b"data: [DONE]\n\n"


def test_a_stream_exception_comes_after_the_outputs_queued_before_it():
    class Failing(_Script):
        async def __anext__(self):
            item = await self.queue.get()
            if isinstance(item, BaseException):
                raise item
            return item

    async def run():
        a, b = _Script([_out("a", [1, 2], [2])]), Failing([])
        stream = merged([(a, _out("a", [1], [1])), (b, _out("b", [7], [7]))])
        got = [await stream.__anext__(), await stream.__anext__()]
        a.release(1)
        b.queue.put_nowait(RuntimeError("choice 1 failed"))
        await asyncio.sleep(0)
        got.append(await stream.__anext__())
        with pytest.raises(RuntimeError, match="choice 1 failed"):
            await stream.__anext__()
        return got

    got = asyncio.run(run())
    assert [(i, o.delta_token_ids) for i, o in got] == [(0, [1]), (1, [7]), (0, [2])]
