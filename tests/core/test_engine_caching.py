"""The engine with prefix caching, state snapshots, the prompt cache, backpressure and timeouts,
over the fake model (which raises on any stale KV block or recurrent state)."""

import asyncio
import time

import pytest
from anna_core.engine.async_engine import AsyncEngine
from anna_core.engine.config import EngineConfig
from anna_core.engine.llm_engine import LLMEngine
from anna_core.engine.sampling_params import SamplingParams
from anna_core.errors import QueueFullError
from anna_core.testing.engine_run import run_to_completion

from ._engine_fakes import FakeLM, greedy_reference

V = 101
GREEDY = SamplingParams(temperature=0.0, max_tokens=6)


class CountingLM(FakeLM):
    """Counts the tokens it computes."""

    computed = 0

    def forward(self, batch, caches):
        self.computed += batch.num_tokens
        return super().forward(batch, caches)


def engine(model=None, **cfg):
    cfg = {"block_size": 4, "num_blocks": 512, "max_num_seqs": 16, "max_prefill_tokens": 96,
           "snapshot_interval": 8, **cfg}
    return LLMEngine(model or FakeLM(V), config=EngineConfig(**cfg))


def run(eng, prompts, params=GREEDY, prefix="r"):
    return run_to_completion(eng, prompts, params, prefix=prefix)


def mixed_prompts(n=16, longest=300):
    """Prompts of 1 to ``longest`` tokens; most share prefixes of one base sequence."""
    base = [(i * 37 + 11) % V for i in range(longest)]
    lengths = [1, longest] + [1 + (i * 53) % longest for i in range(n - 2)]
    return [base[:k] if i % 3 else [(k + j) % V for j in range(k)] for i, k in enumerate(lengths)]


def test_sixteen_mixed_requests_at_once_equal_each_alone_with_caches_on():
    prompts = mixed_prompts()
    eng = engine()
    outs = run(eng, prompts)
    for p, out in zip(prompts, outs):
        assert out.finish_reason == "length", out.error
        assert out.token_ids == greedy_reference(p, 6, V)
        alone = run(engine(max_num_seqs=1, enable_prefix_caching=False, prompt_cache_size=0), [p])[0]
        assert alone.token_ids == out.token_ids
    assert eng.kv.num_used_blocks == 0 and eng.kv.slots.num_used_slots == 0
    # later requests sharing the base sequence resumed from snapshots
    again = run(eng, prompts[1:2] + [prompts[1][:250] + [5, 6, 7]], prefix="again")
    assert again[0].num_cached_tokens == 300  # the exact prompt: prompt cache
    assert again[1].num_cached_tokens == 248  # the deepest snapshot (interval 8) within 250 shared tokens
    assert again[1].token_ids == greedy_reference(prompts[1][:250] + [5, 6, 7], 6, V)
    stats = eng.stats()
    assert stats["prefix_cache_hit_rate"] > 0 and stats["snapshots_used"] > 0 and stats["cached_blocks"] > 0


def test_prefix_hits_skip_computation_and_report_cached_tokens():
    model = CountingLM(V)
    eng = engine(model, prompt_cache_size=0)
    shared = [(7 * i) % V for i in range(40)]
    [first] = run(eng, [shared + [1, 2, 3]])
    assert first.num_cached_tokens == 0 and model.computed == 43 + 5
    model.computed = 0
    [second] = run(eng, [shared + [9, 9]], prefix="s")
    assert second.num_cached_tokens == 40  # snapshot at 40 (interval 8), blocks 0..9 shared
    assert model.computed == 2 + 5 and second.token_ids == greedy_reference(shared + [9, 9], 6, V)
    snap = eng.metrics.snapshot()
    assert snap["prefix_cache"]["hit_tokens"] == 40 and snap["prefix_cache"]["queried_tokens"] == 43 + 42
    assert snap["tokens"]["cached"] == 40


def test_prompt_cache_hit_samples_the_first_token_without_computing():
    model = CountingLM(V)
    eng = engine(model, enable_prefix_caching=False)
    prompt = [(3 * i + 1) % V for i in range(30)]  # ends inside a block: the tail block is copied
    sampled = SamplingParams(temperature=0.8, seed=5, max_tokens=8)
    [first] = run(eng, [prompt], sampled)
    model.computed = 0
    [again] = run(eng, [prompt], sampled, prefix="again")
    assert again.num_cached_tokens == 30 and model.computed == 7  # only the 7 decodes
    assert again.token_ids == first.token_ids
    assert eng.stats()["prompt_cache_entries"] == 1 and eng.kv.num_used_blocks == 0


def test_failed_step_leaves_no_cache_entry_behind():
    model = FakeLM(V)
    eng = engine(model)
    prompt = [5] * 20 + [99]
    model.fail_on_token = 99
    [bad] = run(eng, [prompt])
    assert bad.finish_reason == "error"
    # the chunks up to 8 and 16 succeeded (snapshots kept); the failed one left nothing behind
    assert eng.stats()["prompt_cache_entries"] == 0 and eng.stats()["snapshots_used"] == 2
    model.fail_on_token = None
    [good] = run(eng, [prompt], prefix="g")
    assert good.num_cached_tokens == 16 and good.token_ids == greedy_reference(prompt, 6, V)


def test_queue_full_raises_with_retry_after():
    eng = engine(max_waiting_requests=2)
    eng.add_request("a", [1, 2])
    eng.add_request("b", [3])
    with pytest.raises(QueueFullError, match="waiting queue is full") as err:
        eng.add_request("c", [4])
    assert err.value.retry_after_s >= 1
    assert eng.metrics.snapshot()["requests"]["rejected_429"] == 1
    eng.step()  # a and b start running: room again
    eng.add_request("c", [4])
    eng.config.max_waiting_requests = 1  # a change to the limit applies at once (the servers' tests rely on it)
    with pytest.raises(QueueFullError):
        eng.add_request("d", [5])


def test_request_timeout_ends_with_a_clear_error_and_frees_everything():
    eng = engine(request_timeout_s=5)
    eng.add_request("old", [1, 2, 3], SamplingParams(max_tokens=100), arrival_time=time.perf_counter() - 10)
    eng.add_request("new", [1, 2, 3], GREEDY)
    outs = {o.request_id: o for o in eng.step()}
    assert outs["old"].finish_reason == "error" and "timed out after 5 s" in outs["old"].error
    while eng.has_unfinished():
        for o in eng.step():
            outs[o.request_id] = o
    assert outs["new"].token_ids == greedy_reference([1, 2, 3], 6, V)
    assert eng.kv.num_used_blocks == 0 and eng.kv.slots.num_used_slots == 0


# -- AsyncEngine -------------------------------------------------------------------------------

def test_cancel_half_of_a_hundred_streams_the_rest_finish_and_everything_is_freed():
    async def main():
        eng = AsyncEngine(engine(max_num_seqs=16, num_blocks=256))
        eng.start()
        base = [(i * 13 + 1) % V for i in range(40)]
        prompts = [base[:5 + i % 30] + [i % V] for i in range(100)]
        params = SamplingParams(temperature=0.0, max_tokens=12)

        async def consume(i):
            got = []
            stream = eng.generate(f"q{i}", prompts[i], params)
            async for out in stream:
                got.append(out)
                if i % 2 and len(got) == 3:
                    break
            await stream.aclose()  # the client goes away mid-stream: the request is aborted
            return got

        results = await asyncio.gather(*(consume(i) for i in range(100)))
        for i, got in enumerate(results):
            if i % 2:
                assert len(got) == 3 and not got[-1].finished
            else:
                assert got[-1].finish_reason == "length" and got[-1].token_ids == greedy_reference(prompts[i], 12, V)
        # aborts are applied by the engine thread: one more request flushes them
        [last] = [o async for o in eng.generate("flush", [1], SamplingParams(temperature=0.0, max_tokens=1))][-1:]
        assert last.finished
        stats = eng.stats()
        assert stats["kv_blocks_used"] == 0 and stats["state_slots_used"] == 0
        assert stats["running"] == 0 and stats["waiting"] == 0
        snap = eng.metrics.snapshot()
        assert snap["requests"]["finished_by_reason"]["abort"] == 50
        assert snap["requests"]["finished_by_reason"]["length"] == 51
        await eng.shutdown()

    asyncio.run(main())


def test_async_front_door_refuses_when_the_queue_is_full():
    async def main():
        eng = AsyncEngine(engine(max_num_seqs=1, max_waiting_requests=2))
        eng.start()
        long = SamplingParams(temperature=0.0, max_tokens=10_000, ignore_eos=True)
        a = eng.generate("a", [1], long)
        await a.__anext__()  # a runs
        queued = [eng.generate(rid, [2], long) for rid in "bc"]
        tasks = [asyncio.ensure_future(g.__anext__()) for g in queued]
        await asyncio.sleep(0.05)
        with pytest.raises(QueueFullError) as err:
            await eng.generate("d", [3], long).__anext__()
        assert err.value.retry_after_s >= 1
        assert eng.metrics.snapshot()["requests"]["rejected_429"] == 1
        await eng.shutdown(drain=False)
        for t in tasks:
            assert (await t).finish_reason == "abort"

    asyncio.run(main())
