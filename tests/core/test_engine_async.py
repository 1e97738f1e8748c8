"""AsyncEngine: one engine thread, per-request queues, aborts, draining shutdown, failures."""

import asyncio

import pytest
from anna_core.engine.async_engine import AsyncEngine
from anna_core.engine.config import EngineConfig
from anna_core.engine.llm_engine import LLMEngine
from anna_core.engine.sampling_params import SamplingParams
from anna_core.errors import EngineDeadError, InvalidRequestError

from ._engine_fakes import FakeLM, greedy_reference

V = 101


def make(model=None, **cfg):
    cfg = {"block_size": 4, "num_blocks": 128, "max_num_seqs": 4, "max_prefill_tokens": 32, **cfg}
    eng = AsyncEngine(LLMEngine(model or FakeLM(V), config=EngineConfig(**cfg)))
    eng.start()
    return eng


async def collect(eng, rid, prompt, params):
    outs = [o async for o in eng.generate(rid, prompt, params)]
    assert [t for o in outs for t in o.delta_token_ids] == outs[-1].token_ids
    return outs


def test_eight_concurrent_consumers_get_independent_correct_outputs():
    async def main():
        eng = make()  # 4 sequences at once: the rest wait and are admitted as others finish
        prompts = [[i + 1] * (i * 5 + 1) for i in range(8)]
        greedy = SamplingParams(temperature=0.0, max_tokens=10)
        results = await asyncio.gather(*(collect(eng, f"c{i}", p, greedy) for i, p in enumerate(prompts)))
        for p, outs in zip(prompts, results):
            assert outs[-1].finished and outs[-1].finish_reason == "length"
            assert outs[-1].token_ids == greedy_reference(p, 10, V)
            assert len(outs) == 10  # one output per generated token
        stats = eng.stats()
        assert stats["kv_blocks_used"] == 0 and stats["state_slots_used"] == 0
        assert stats["tokens_generated"] == 80 and stats["running"] == stats["waiting"] == 0
        assert stats["kv_blocks_total"] == 128 and stats["state_slots_total"] == 4 and stats["uptime_s"] > 0
        await eng.shutdown(drain=True)
        assert not eng.is_running

    asyncio.run(main())


def test_a_consumer_that_stops_iterating_aborts_its_request():
    async def main():
        eng = make()
        params = SamplingParams(temperature=0.0, max_tokens=200)
        gen = eng.generate("a", [1, 2, 3], params)
        first = await gen.__anext__()
        assert first.token_ids == greedy_reference([1, 2, 3], 1, V)
        await gen.aclose()

        async def cancelled():
            async for _ in eng.generate("b", [4, 5], params):
                pass

        task = asyncio.create_task(cancelled())
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # the engine keeps serving; once the aborts are processed everything is free again
        outs = await collect(eng, "c", [7], SamplingParams(temperature=0.0, max_tokens=3))
        assert outs[-1].token_ids == greedy_reference([7], 3, V)
        stats = eng.stats()
        assert stats["kv_blocks_used"] == 0 and stats["state_slots_used"] == 0 and stats["running"] == 0
        await eng.shutdown()

    asyncio.run(main())


def test_shutdown_with_drain_finishes_in_flight_and_refuses_new_requests():
    async def main():
        eng = make()
        params = SamplingParams(temperature=0.0, max_tokens=30)
        task = asyncio.create_task(collect(eng, "a", [1, 2], params))
        await asyncio.sleep(0.01)
        await eng.shutdown(drain=True)
        outs = await task
        assert outs[-1].finish_reason == "length" and len(outs[-1].token_ids) == 30
        with pytest.raises(EngineDeadError):
            async for _ in eng.generate("b", [1], params):
                pass

    asyncio.run(main())


def test_shutdown_without_drain_aborts_in_flight_requests():
    async def main():
        eng = make()
        gen = eng.generate("a", [1, 2], SamplingParams(temperature=0.0, max_tokens=10_000, ignore_eos=True))
        await gen.__anext__()
        await eng.shutdown(drain=False)
        rest = [o async for o in gen]
        assert rest[-1].finished and rest[-1].finish_reason == "abort"

    asyncio.run(main())


def test_bad_requests_raise_to_the_caller_and_model_errors_fail_only_their_request():
    async def main():
        model = FakeLM(V)
        model.fail_on_token = 99
        eng = make(model)
        with pytest.raises(InvalidRequestError):
            async for _ in eng.generate("x", [], SamplingParams()):
                pass
        greedy = SamplingParams(temperature=0.0, max_tokens=3)
        bad, good = await asyncio.gather(collect(eng, "bad", [99], greedy), collect(eng, "good", [5], greedy))
        assert bad[-1].finish_reason == "error" and "injected failure" in bad[-1].error
        # good may have shared the failing step; if so it failed too, otherwise it is correct
        assert good[-1].finish_reason == "error" or good[-1].token_ids == greedy_reference([5], 3, V)
        after = await collect(eng, "after", [5], greedy)
        assert after[-1].token_ids == greedy_reference([5], 3, V)
        await eng.shutdown()

    asyncio.run(main())
