"""Scheduler knobs: profiles and flag precedence, decode read budget, batch wait, fairness, dynamic
budget (pure Python, no torch)."""

import pytest
from anna_core.cache_spec import CacheSpec, FullAttentionSpec
from anna_core.engine.cache_manager import CacheManager
from anna_core.engine.config import EngineConfig
from anna_core.engine.profiles import PROFILES, SCHEDULER_KNOBS, resolve_profile
from anna_core.engine.request import Request
from anna_core.engine.sampling_params import SamplingParams
from anna_core.engine.sched_output import ModelRunnerOutput, StepPath
from anna_core.engine.scheduler import Scheduler
from anna_core.errors import AnnaError


def ran(sampled):
    """The runner's output of a step that sampled ``sampled`` (request id -> token)."""
    return ModelRunnerOutput(StepPath.EAGER, sampled=sampled)


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def make(num_blocks=256, block_size=4, **cfg):
    clock = Clock()
    cfg = {"prefill_chunk_size": 1000, "prompt_cache_size": 0, "enable_prefix_caching": False, **cfg}
    cfg.setdefault("max_prefill_tokens", 2048)  # what an engine on the CPU sets
    config = EngineConfig(block_size=block_size, num_blocks=num_blocks, **cfg)
    kv = CacheManager(CacheSpec((FullAttentionSpec(layers=[0], num_kv_heads=1, head_dim=1),)), num_blocks, block_size,
                      config.max_num_seqs)
    sched = Scheduler(config, kv, clock=clock)
    return sched, clock


def req(rid, n, clock, max_tokens=100):
    return Request(rid, list(range(1, n + 1)), SamplingParams(max_tokens=max_tokens), arrival_time=clock.t)


def step(sched, out, token=7):
    return sched.update(out, ran({s.request_id: token for s in out.seqs if s.samples}))


def summary(out):
    return [(s.request_id, s.num_new_tokens) for s in out.seqs]


# -- profiles -----------------------------------------------------------------------------------

def test_profile_values_then_explicit_flags_win():
    assert resolve_profile("none", {}) == {}
    inter = resolve_profile("interactive", {"max_num_seqs": 3, "batch_wait_ms": None})
    assert inter["max_num_seqs"] == 3  # explicit beats the profile
    assert inter["max_prefill_tokens"] == PROFILES["interactive"]["max_prefill_tokens"]  # None = not given
    cfg = EngineConfig.from_profile("throughput", batch_wait_ms=0.0, block_size=32)
    assert cfg.batch_wait_ms == 0.0 and cfg.block_size == 32  # an explicit 0 is a value, not "unset"
    assert cfg.max_num_seqs == PROFILES["throughput"]["max_num_seqs"]
    assert EngineConfig.from_profile("none", max_prefill_tokens=5) == EngineConfig(max_prefill_tokens=5)
    for name in ("interactive", "throughput"):
        assert set(PROFILES[name]) == set(SCHEDULER_KNOBS)  # a profile sets every knob together
        EngineConfig.from_profile(name)  # and its values are valid
    with pytest.raises(AnnaError, match="unknown scheduler profile"):
        EngineConfig.from_profile("fast")
    with pytest.raises(AnnaError, match="unknown engine settings: bogus"):
        EngineConfig.from_profile("none", bogus=1)


def test_config_validates_knobs():
    with pytest.raises(AnnaError, match="batch_wait_ms"):
        EngineConfig(batch_wait_ms=-1)
    with pytest.raises(AnnaError, match="multiple of block_size"):
        EngineConfig(block_size=16, snapshot_interval=100)
    with pytest.raises(AnnaError, match="max_prefill_tokens"):
        EngineConfig(max_prefill_tokens=0)


# -- budgets ------------------------------------------------------------------------------------

def test_prefill_budget_counts_prompt_tokens_only_and_chunks_per_request():
    sched, clock = make(max_prefill_tokens=10, prefill_chunk_size=4)
    for rid in "ab":
        sched.add(req(rid, 3, clock))
    step(sched, sched.schedule())
    sched.add(req("c", 20, clock))
    sched.add(req("d", 20, clock))
    out = sched.schedule()  # two decodes (not counted) + c 4 + d 4 (chunk) = 8 prompt tokens
    assert summary(out) == [("a", 1), ("b", 1), ("c", 4), ("d", 4)] and out.num_batched_tokens == 10


def test_decode_read_budget_rotates_decodes():
    sched, clock = make(max_decode_tokens=14)
    for rid in "abc":
        sched.add(req(rid, 5, clock))
    step(sched, sched.schedule())  # three prompts of 5, each sampled: the next decodes read 6 tokens
    seen = []
    for _ in range(3):
        out = sched.schedule()
        seen.append([s.request_id for s in out.seqs])
        step(sched, out)
    # 6 + 6 (+ 6 > 14); then c 6 + a 7 (+ b 7 > 14); then b 7 + c 7: least recently scheduled first
    assert seen == [["a", "b"], ["c", "a"], ["b", "c"]]


def test_the_first_decode_always_runs():
    sched, clock = make(max_decode_tokens=2)
    sched.add(req("a", 9, clock))
    step(sched, sched.schedule())
    assert summary(sched.schedule()) == [("a", 1)]


def test_dynamic_budget_shrinks_prefill_when_memory_runs_short():
    sched, clock = make(num_blocks=16, max_prefill_tokens=40, dynamic_token_budget=True)
    assert sched.budgets() == (40, 0)
    sched.add(req("a", 40, clock))
    step(sched, sched.schedule())  # 10 of 16 blocks used -> 6 free: scale 2 * 6/16 = 0.75
    assert sched.budgets() == (30, 0)
    sched2, clock2 = make(max_prefill_tokens=100, max_decode_tokens=40, dynamic_token_budget=True)
    for rid in "ab":
        sched2.add(req(rid, 9, clock2))
    step(sched2, sched2.schedule())  # two decodes read 10 each: 20 of 40 -> half the prefill budget
    assert sched2.budgets() == (int(100 * (1 - 20 / 40) * min(1.0, 2 * sched2.kv.groups[0].num_free_blocks / 256)), 40)


# -- waiting: batch wait and fairness -----------------------------------------------------------

def test_batch_wait_holds_arrivals_only_while_busy():
    sched, clock = make(batch_wait_ms=50, max_num_seqs=8)
    sched.add(req("a", 3, clock))
    out = sched.schedule()
    assert summary(out) == [("a", 3)]  # idle: admitted at once
    step(sched, out)
    sched.add(req("b", 3, clock))
    clock.t += 0.010
    sched.add(req("c", 3, clock))
    out = sched.schedule()
    assert summary(out) == [("a", 1)]  # busy: b and c wait for more arrivals
    step(sched, out)
    assert sched.next_wakeup() == 0.0  # a is running: the engine keeps stepping
    clock.t += 0.045  # b has now waited 55 ms
    assert summary(sched.schedule()) == [("a", 1), ("b", 3), ("c", 3)]  # admitted together


def test_batch_wait_ends_early_when_a_full_batch_waits():
    sched, clock = make(batch_wait_ms=1000, max_num_seqs=3)
    sched.add(req("a", 3, clock))
    step(sched, sched.schedule())
    sched.add(req("b", 3, clock))
    out = sched.schedule()
    assert summary(out) == [("a", 1)]
    step(sched, out)
    sched.add(req("c", 3, clock))  # b and c fill the two free sequences
    assert summary(sched.schedule()) == [("a", 1), ("b", 3), ("c", 3)]


def test_an_idle_engine_never_waits():
    sched, clock = make(batch_wait_ms=100)
    assert sched.next_wakeup() is None
    sched.add(req("a", 3, clock))
    sched.add(req("b", 3, clock))
    assert sched.next_wakeup() == 0.0
    assert summary(sched.schedule()) == [("a", 3), ("b", 3)]


def test_overdue_requests_are_admitted_before_running_prefills_continue():
    sched, clock = make(max_prefill_tokens=8, prefill_chunk_size=8, max_queue_wait_ms=100)
    sched.add(req("long", 64, clock))
    out = sched.schedule()
    assert summary(out) == [("long", 8)]
    step(sched, out)
    sched.add(req("short", 4, clock))
    out = sched.schedule()
    assert summary(out) == [("long", 8)]  # not overdue yet: the running prefill keeps the budget
    step(sched, out)
    clock.t += 0.2
    assert summary(sched.schedule()) == [("short", 4), ("long", 4)]  # overdue: admitted first

    plain, clock = make(max_prefill_tokens=8, prefill_chunk_size=8)  # without the rule it starves
    plain.add(req("long", 64, clock))
    step(plain, plain.schedule())
    plain.add(req("short", 4, clock))
    clock.t += 10
    assert summary(plain.schedule()) == [("long", 8)]
