"""Memory admission (estimator, 400 vs 503) and failed steps (injected out-of-memory, degraded mode) on the CPU."""

from __future__ import annotations

import asyncio

import pytest
import torch
from anna_core.cache_spec import CacheSpec, FullAttentionSpec, RecurrentStateSpec, SlidingWindowSpec
from anna_core.engine.async_engine import AsyncEngine
from anna_core.engine.config import EngineConfig
from anna_core.engine.faults import FaultInjector, StepFailures, classify_failure
from anna_core.engine.llm_engine import LLMEngine
from anna_core.engine.memory_admission import (
    MemoryAdmission,
    MemoryEstimate,
    MemoryEstimator,
    MemoryPolicy,
    MemorySnapshot,
    StaticMemoryProbe,
)
from anna_core.engine.sampling_params import SamplingParams
from anna_core.errors import AnnaError, EngineDegradedError, InvalidRequestError, MemoryUnavailableError

from tests.core._engine_fakes import FakeLM, greedy_reference

V = 101
MIB = 1 << 20
GREEDY = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)
SPEC = CacheSpec((FullAttentionSpec(layers=[0, 1], num_kv_heads=2, head_dim=8),
                  SlidingWindowSpec(layers=[2], num_kv_heads=1, head_dim=8, window=8),
                  RecurrentStateSpec(layers=[3], conv_shape=(4, 3), state_shape=(2, 4, 4))))


def _estimator(**kw) -> MemoryEstimator:
    args = dict(block_size=4, dtype=torch.float32, max_model_len=64, max_step_tokens=16, vocab_size=100,
                hidden_size=8, safety_factor=1.0)
    return MemoryEstimator(SPEC, **(args | kw))


# -- the estimator ------------------------------------------------------------------------------


def test_estimate_counts_each_cache_group_activations_grammar_and_logprobs():
    est = _estimator().estimate(10, 10)
    full = 2 * 2 * 4 * 2 * 8 * 4  # K and V, 2 layers, 4 tokens, 2 heads, dim 8, fp32: one block
    assert est.cache_bytes == (5 * full,  # 20 tokens: 5 blocks
                               3 * (full // 4),  # window of 8 tokens: 8 / 4 + 1 blocks of 1 layer, 1 head
                               (4 * 3 * 4 + 2 * 4 * 4 * 4))  # one state slot: conv fp32 + recurrent fp32
    # the largest step is the whole prompt (10 <= 16 tokens) x hidden 8 x fp32 x widths, plus a logits row
    assert est.activation_bytes == _estimator().step_activation_bytes(10, rows=1) == 10 * 8 * 4 * 16 + 100 * 8
    assert est.grammar_bytes == 0 and est.logprobs_bytes == 0
    extra = _estimator().estimate(10, 10, grammar=True, logprobs=True)
    assert extra.grammar_bytes == 4 * 4 and extra.logprobs_bytes == 400
    from anna_core.engine.prompt_logprobs import ROWS_PER_HEAD_CALL

    scored = _estimator().estimate(10, 10, logprobs=True, prompt_logprobs=True)  # the prompt rows' logits and logprobs
    assert scored.logprobs_bytes == 400 + ROWS_PER_HEAD_CALL * 100 * 4 * 2
    assert extra.total_bytes == est.total_bytes + 416


def test_estimate_caps_the_sequence_at_max_model_len_and_the_step_at_its_budget():
    long = _estimator().estimate(40, None)  # no max_tokens: up to max_model_len
    assert long.cache_bytes[0] == _estimator().estimate(40, 10_000).cache_bytes[0] == 16 * 2 * 2 * 4 * 2 * 8 * 4
    assert long.activation_bytes == _estimator().step_activation_bytes(16, rows=1)  # chunks of 16 tokens


def test_safety_factor_scales_generation_memory_only():
    one, two = _estimator().estimate(10, 10), _estimator(safety_factor=2.0).estimate(10, 10)
    assert two.cache_bytes == one.cache_bytes
    assert two.generation_bytes == 2 * one.generation_bytes
    assert two.total_bytes - one.total_bytes == one.generation_bytes


def _admission(total: int, free: int | None = None, weights: int = 0, **policy) -> MemoryAdmission:
    est = _estimator()
    return MemoryAdmission(MemoryPolicy(**policy), est, StaticMemoryProbe(total, free), weights_bytes=weights,
                           pool_bytes=(1 << 40, 1 << 40, 1 << 40), max_step_activation_bytes=1 << 40)


def test_admission_refuses_400_when_it_never_fits_and_503_when_it_fits_later():
    need = _estimator().estimate(10, 10).total_bytes
    adm = _admission(total=1000 + int(need * 1.5), weights=1000)
    adm.admit("a", _estimator().estimate(10, 10))
    with pytest.raises(MemoryUnavailableError, match="retry later"):
        adm.admit("b", _estimator().estimate(10, 10))
    adm.admit("b", _estimator().estimate(10, 10), busy_check=False)  # the synchronous path queues instead
    adm.release("b")
    with pytest.raises(InvalidRequestError) as info:
        adm.admit("huge", _estimator().estimate(40, 10_000))
    assert info.value.code == "insufficient_memory"
    adm.release("a")
    adm.admit("b", _estimator().estimate(10, 10))
    assert adm.report()["refused_400"] == 1 and adm.report()["refused_503"] == 1 and adm.report()["admitted"] == 1


def test_a_group_is_admitted_together_or_not_at_all():
    one = _estimator().estimate(10, 10)
    admission = _admission(int(one.total_bytes * 1.5))
    with pytest.raises(InvalidRequestError) as info:  # two never fit together: 400, not 503 forever
        admission.admit_group([("a-0", one), ("a-1", one)])
    assert info.value.code == "insufficient_memory" and admission.report()["admitted"] == 0
    admission = _admission(int(one.total_bytes * 2.5))
    admission.admit("x", one)
    with pytest.raises(MemoryUnavailableError):  # fits once x ends; no sibling is left held
        admission.admit_group([("a-0", one), ("a-1", one)])
    assert admission.report()["admitted"] == 1
    admission.release("x")
    admission.admit_group([("a-0", one), ("a-1", one)])
    assert admission.report()["admitted"] == 2


def test_ratio_and_reserve_shrink_the_capacity_and_min_free_reads_the_probe():
    adm = _admission(total=100 * MIB, max_estimated_usage_ratio=0.5, reserve_memory_mib=10)
    assert adm.capacity_bytes == 40 * MIB
    short = _admission(total=100 * MIB, free=2 * MIB, min_free_memory_mib=2)
    with pytest.raises(MemoryUnavailableError, match="min_free_memory_mib"):
        short.admit("a", _estimator().estimate(10, 10))
    short.probe.free_bytes = 3 * MIB  # memory freed elsewhere: admitted now
    short.admit("a", _estimator().estimate(10, 10))


def test_an_engine_that_could_admit_nothing_fails_at_start():
    with pytest.raises(AnnaError, match="min_free_memory_mib"):  # the idle engine leaves 512 MiB free, under 1 GiB
        _engine(StaticMemoryProbe(8 << 30, 512 * MIB), min_free_memory_mib=1024)
    _engine(StaticMemoryProbe(8 << 30, 2048 * MIB), min_free_memory_mib=1024)  # room left: it starts
    admission = _admission(total=100 * MIB, weights=60 * MIB, max_estimated_usage_ratio=0.5)
    with pytest.raises(AnnaError, match="weights take 60.0 MiB"):
        admission.check_startup()


def test_held_cache_bytes_are_capped_at_the_allocated_pool():
    est = MemoryEstimate(cache_bytes=(600, 0), activation_bytes=10)
    adm = MemoryAdmission(MemoryPolicy(generation_memory_safety_factor=1.0), _estimator(), StaticMemoryProbe(2000, None),
                          weights_bytes=0, pool_bytes=(1000, 0), max_step_activation_bytes=15)
    for rid in "abcde":  # 5 x 600 bytes of KV, but the pool has 1000: the scheduler queues within it
        adm.admit(rid, est)
    assert adm.held_bytes() == 1000 + 15


def test_device_probe_counts_the_allocators_cached_blocks_as_free(monkeypatch):
    import anna_core.device
    from anna_core.engine.memory_admission import DeviceMemoryProbe

    fake = {"allocated_bytes": 30, "reserved_bytes": 50, "free_bytes": 100, "total_bytes": 1000}
    monkeypatch.setattr(anna_core.device, "memory_stats", lambda device: fake)
    snap = DeviceMemoryProbe(torch.device("cpu")).snapshot()
    assert (snap.total_bytes, snap.free_bytes) == (1000, 120)
    monkeypatch.setattr(anna_core.device, "memory_stats", lambda device: {})
    assert DeviceMemoryProbe(torch.device("cpu")).snapshot() == MemorySnapshot(None, None)


@pytest.mark.parametrize("field, value", [("max_estimated_usage_ratio", 0.0), ("max_estimated_usage_ratio", 1.5),
                                          ("generation_memory_safety_factor", 0.9),
                                          ("generation_memory_safety_factor", float("inf")),
                                          ("min_free_memory_mib", -1.0), ("max_consecutive_step_failures", 0)])
def test_config_bounds(field, value):
    with pytest.raises(AnnaError, match=field):
        EngineConfig(**{field: value})


def test_classify_failure():
    assert classify_failure(torch.OutOfMemoryError("CUDA out of memory")) == "oom"
    assert classify_failure(RuntimeError("CUDA error: an illegal memory access was encountered")) == "device"
    assert classify_failure(ValueError("bad row")) == "other"
    failures = StepFailures(max_consecutive=2)
    assert failures.failed(ValueError("x")) is None
    failures.succeeded()
    assert failures.failed(ValueError("x")) is None and failures.failed(ValueError("y")) is not None


# -- the engine ---------------------------------------------------------------------------------


def _engine(probe: StaticMemoryProbe | None = None, faults: FaultInjector | None = None, **cfg) -> LLMEngine:
    cfg = dict(block_size=4, num_blocks=64, max_num_seqs=2, prompt_cache_size=0, enable_prefix_caching=False) | cfg
    return LLMEngine(FakeLM(V), config=EngineConfig(**cfg), memory_probe=probe or StaticMemoryProbe(1 << 40, None),
                     faults=faults)


def _drain(engine: LLMEngine) -> dict[str, object]:
    finals = {}
    for _ in range(200):
        if not engine.has_unfinished():
            break
        for out in engine.step():
            if out.finished:
                finals[out.request_id] = out
    return finals


def _gauges(engine: LLMEngine) -> tuple[int, int, int, int]:
    snap = engine.metrics.snapshot()
    return (snap["requests"]["running"], snap["requests"]["waiting"], snap["kv_blocks"]["used"],
            snap["state_slots"]["used"])


def test_an_oversized_request_is_refused_before_it_runs():
    probe = StaticMemoryProbe(1 << 40, None)
    engine = _engine(probe)
    small = engine.estimate_memory([5] * 4, GREEDY).total_bytes
    engine = _engine(StaticMemoryProbe(small * 2, None), max_model_len=200)
    with pytest.raises(InvalidRequestError, match="estimated") as info:
        engine.add_request("big", [5] * 4, SamplingParams(max_tokens=190))
    assert info.value.code == "insufficient_memory" and engine.num_steps == 0 and not engine.has_unfinished()
    assert engine.metrics.snapshot()["requests"]["refused_memory"] == 1
    assert 'anna_requests_refused_memory_total{status="400"} 1.0' in engine.metrics.prometheus_text().decode()
    engine.add_request("small", [5] * 4, GREEDY)
    assert _drain(engine)["small"].token_ids == greedy_reference([5] * 4, 4, V)


def test_injected_oom_fails_only_its_step_and_the_engine_keeps_serving():
    faults = FaultInjector()
    engine = _engine(faults=faults)
    for rid, prompt in (("a", [5, 6]), ("b", [7, 8]), ("c", [9, 10])):  # c waits: two sequences per step
        engine.add_request(rid, prompt, GREEDY)
    faults.arm(step=2)  # a's and b's first decode
    finals = _drain(engine)
    assert faults.raised == 1
    for rid in "ab":
        assert finals[rid].finish_reason == "error" and "out of memory" in finals[rid].error
    assert finals["c"].finish_reason == "length" and finals["c"].token_ids == greedy_reference([9, 10], 4, V)
    assert _gauges(engine) == (0, 0, 0, 0)
    assert engine.stats()["memory_admission"]["admitted"] == 0
    engine.add_request("d", [5, 6], GREEDY)
    assert _drain(engine)["d"].token_ids == greedy_reference([5, 6], 4, V)
    assert engine.degraded is None and engine.stats()["step_failures"]["out_of_memory"] == 1


def test_repeated_decode_failures_degrade_the_engine():
    faults = FaultInjector()
    # one decode per step (max_decode_tokens): a's and b's decodes fail in two steps in a row
    engine = _engine(faults=faults, max_consecutive_step_failures=2, max_decode_tokens=3)
    engine.add_request("a", [5, 6], GREEDY)
    engine.add_request("b", [7, 8], GREEDY)
    engine.step()  # both prompts
    faults.arm_next(2)
    finals = _drain(engine)
    assert all(o.finish_reason == "error" for o in finals.values()) and set(finals) == set("ab")
    assert "out of memory" in finals["a"].error and finals["a"].error_code == "insufficient_memory"
    assert engine.degraded is not None and "2 steps failed in a row" in engine.degraded
    assert "Tried to allocate" not in finals["a"].error + engine.degraded  # the raw device message stays in the log
    assert engine.stats()["degraded"] == engine.degraded
    text = engine.metrics.prometheus_text().decode()
    assert "anna_engine_degraded 1.0" in text and 'anna_step_failures_total{kind="oom"} 2.0' in text
    assert engine.metrics.snapshot()["step_failures"] == 2
    assert _gauges(engine) == (0, 0, 0, 0)
    with pytest.raises(EngineDegradedError):
        engine.add_request("d", [5], GREEDY)


def test_a_held_request_fails_with_engine_degraded_when_the_engine_degrades():
    faults = FaultInjector()
    engine = _engine(faults=faults, max_consecutive_step_failures=1)
    engine.add_request("a", [5, 6], GREEDY)
    engine.add_request("b", [7, 8], GREEDY)
    engine.add_request("c", [9, 10], GREEDY)  # waits: two sequences per step
    engine.step()
    faults.arm_next(1)  # a's and b's decode
    finals = _drain(engine)
    assert finals["a"].error_code == "insufficient_memory"
    assert finals["c"].finish_reason == "error" and finals["c"].error_code == "engine_degraded"


def test_a_client_retrying_a_prompt_that_runs_out_of_memory_does_not_degrade_the_engine():
    engine = _engine(max_consecutive_step_failures=2, num_blocks=256, max_model_len=512)
    execute = engine.runner.execute

    def too_big(out, *args, **kwargs):  # a long prompt's prefill needs more activation memory than is free
        if any(s.request.num_prompt_tokens > 100 for s in out.seqs):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return execute(out, *args, **kwargs)

    engine.runner.execute = too_big
    for i in range(5):  # the same client retries, as the error tells it to
        engine.add_request(f"big{i}", [5] * 150, GREEDY)
        final = _drain(engine)[f"big{i}"]
        assert final.finish_reason == "error" and final.error_code == "insufficient_memory"
    assert engine.degraded is None
    assert engine.stats()["step_failures"] == {"total": 5, "out_of_memory": 5, "consecutive": 0, "degraded": None}
    engine.add_request("small", [5, 6], GREEDY)
    assert _drain(engine)["small"].token_ids == greedy_reference([5, 6], 4, V)


def test_an_oom_in_a_prefill_fails_only_the_prompts_and_requeues_the_decodes():
    engine = _engine(num_blocks=256, max_model_len=512)
    execute = engine.runner.execute

    def too_big(out, *args, **kwargs):
        if any(s.request.num_prompt_tokens > 100 and s.start < s.request.num_prompt_tokens for s in out.seqs):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return execute(out, *args, **kwargs)

    engine.runner.execute = too_big
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    engine.add_request("innocent", [5, 6, 7], params)
    streamed = []
    for _ in range(3):
        for out in engine.step():
            streamed += out.delta_token_ids
    engine.add_request("big", [5] * 150, GREEDY)  # joins the innocent one's decode step; that step fails
    finals = {}
    for _ in range(100):
        if not engine.has_unfinished():
            break
        for out in engine.step():
            streamed += out.delta_token_ids if out.request_id == "innocent" else []
            if out.finished:
                finals[out.request_id] = out
    assert finals["big"].finish_reason == "error" and finals["big"].error_code == "insufficient_memory"
    assert finals["innocent"].finish_reason == "length"
    assert finals["innocent"].token_ids == streamed == greedy_reference([5, 6, 7], 12, V)
    assert engine.scheduler.num_preemptions == 1
    assert engine.metrics.snapshot()["requests"]["preemptions"] == 1
    assert engine.degraded is None and _gauges(engine) == (0, 0, 0, 0)


def test_a_lost_device_degrades_at_once():
    faults = FaultInjector()
    engine = _engine(faults=faults)
    faults.arm(1, lambda: RuntimeError("CUDA error: an illegal memory access was encountered"))
    engine.add_request("a", [5, 6], GREEDY)
    assert _drain(engine)["a"].finish_reason == "error"
    assert engine.degraded is not None and "device failed" in engine.degraded


def test_failure_messages_for_clients_are_short():
    from anna_core.engine.faults import short_description

    assert short_description(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")) == \
        "OutOfMemoryError (the device ran out of memory)"
    long = RuntimeError("CUDA error: an illegal memory access was encountered " + "x" * 500 + "\nstack trace")
    text = short_description(long)
    assert text.startswith("RuntimeError: CUDA error: an illegal") and len(text) < 140 and "stack" not in text


def test_async_engine_refuses_503_while_busy_and_admits_once_running_requests_finish():
    engine = _engine()
    need = engine.estimate_memory([5, 6], SamplingParams(max_tokens=30)).total_bytes
    engine = _engine(StaticMemoryProbe(int(need * 1.5), None))
    eng = AsyncEngine(engine)

    async def main():
        eng.start()
        long = eng.generate("a", [5, 6], SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True))
        await long.__anext__()
        with pytest.raises(MemoryUnavailableError):
            async for _ in eng.generate("b", [5, 6], SamplingParams(max_tokens=30)):
                pass
        rest = [o async for o in long]
        assert rest[-1].finish_reason == "length"
        outs = [o async for o in eng.generate("b", [5, 6], SamplingParams(temperature=0.0, max_tokens=30))]
        assert outs[-1].finished and outs[-1].finish_reason != "error"
        await eng.shutdown()

    asyncio.run(main())
    assert engine.stats()["memory_admission"]["admitted"] == 0


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from tests.core._tiny_family import write_tiny_config

    return write_tiny_config(tmp_path_factory.mktemp("tinyq_faults"))


def test_oom_with_a_step_in_flight_drains_it_first(tiny_dir):
    from anna_core.engine.request import PENDING
    from anna_core.testing.engine_run import run_to_completion

    from tests.core._graph_engine import graph_engine

    params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    ref = run_to_completion(graph_engine(tiny_dir, async_scheduling=False), [[5, 6, 7]], [params])[0].token_ids
    eng = graph_engine(tiny_dir, async_scheduling=True)
    eng.faults = FaultInjector()
    eng.add_request("a", [5, 6, 7], params)
    streamed: list[int] = []
    for _ in range(4):
        for out in eng.step():
            streamed += out.delta_token_ids
    assert eng._inflight is not None  # a decode step is launched, not read back
    eng.faults.arm(eng.num_steps + 1)  # the next launch runs out of memory
    outs = eng.step()
    for out in outs:
        streamed += out.delta_token_ids
    assert outs[-1].finished and outs[-1].finish_reason == "error" and "out of memory" in outs[-1].error
    assert PENDING not in streamed and streamed == ref[:len(streamed)] and len(streamed) >= 4  # the drained token
    assert eng._inflight is None and eng.kv.num_used_blocks == 0 and eng.kv.slots.num_used_slots == 0
    assert _gauges(eng) == (0, 0, 0, 0)
    assert run_to_completion(eng, [[5, 6, 7]], [params])[0].token_ids == ref


def test_a_failed_read_back_and_its_failed_step_count_once(tiny_dir):
    from tests.core._graph_engine import graph_engine

    eng = graph_engine(tiny_dir, async_scheduling=True)
    eng.faults = FaultInjector()
    eng.add_request("a", [5, 6, 7], SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True))
    for _ in range(4):
        eng.step()
    assert eng._inflight is not None

    class FailedReadBack:
        def tolist(self):
            raise torch.OutOfMemoryError("CUDA out of memory (read back)")

    eng._inflight.ids = FailedReadBack()
    eng.faults.arm(eng.num_steps + 1)  # the step that drains it fails too
    eng.step()
    assert eng.failures.report() == {"total": 1, "out_of_memory": 1, "consecutive": 1, "degraded": None}
    assert eng.metrics.snapshot()["step_failures"] == 1


def test_a_request_admitted_just_before_the_engine_degrades_ends_with_engine_degraded():
    engine = _engine()
    eng = AsyncEngine(engine)

    async def main():
        eng.start()
        engine.admit = lambda *a, **k: None  # admitted; the engine degrades before its thread takes it
        engine.failures.degraded = "the device failed: test"
        outs = [o async for o in eng.generate("a", [5, 6], GREEDY)]
        await eng.shutdown()
        return outs

    outs = asyncio.run(main())
    assert outs[-1].finish_reason == "error" and outs[-1].error_code == "engine_degraded"
