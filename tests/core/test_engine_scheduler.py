"""Scheduler, block manager and state pool: pure-Python bookkeeping (no torch anywhere)."""

import subprocess
import sys

import pytest
from anna_core.cache_spec import CacheSpec, FullAttentionSpec
from anna_core.engine.block_manager import BlockManager
from anna_core.engine.cache_manager import CacheManager
from anna_core.engine.config import EngineConfig
from anna_core.engine.request import Request, RequestStatus
from anna_core.engine.sampling_params import SamplingParams
from anna_core.engine.sched_output import ModelRunnerOutput, StepPath
from anna_core.engine.scheduler import Scheduler
from anna_core.engine.state_pool import StatePool
from anna_core.errors import AnnaError


def ran(sampled):
    """The runner's output of a step that sampled ``sampled`` (request id -> token)."""
    return ModelRunnerOutput(StepPath.EAGER, sampled=sampled)

ATTENTION = CacheSpec((FullAttentionSpec(layers=[0], num_kv_heads=1, head_dim=1),))


def test_bookkeeping_modules_do_not_import_torch():
    code = ("import sys; import anna_core.engine.scheduler, anna_core.engine.block_manager, "
            "anna_core.engine.cache_manager, anna_core.cache_spec, "
            "anna_core.engine.state_pool, anna_core.engine.request, anna_core.engine.config; "
            "assert 'torch' not in sys.modules, 'torch was imported'; print('ok')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def make(num_blocks=64, block_size=4, **cfg):
    cfg.setdefault("max_prefill_tokens", 2048)  # what an engine on the CPU sets
    config = EngineConfig(block_size=block_size, num_blocks=num_blocks, **cfg)
    kv = CacheManager(ATTENTION, num_blocks, block_size, config.max_num_seqs)
    return Scheduler(config, kv), kv.groups[0], kv.slots


def req(rid, n, max_tokens=100):
    return Request(rid, list(range(1, n + 1)), SamplingParams(max_tokens=max_tokens))


def step(sched, out, token=7):
    """Pretend the model ran: every sampling sequence gets ``token``."""
    return sched.update(out, ran({s.request_id: token for s in out.seqs if s.samples}))


def test_block_manager_allocates_grows_and_frees():
    bm = BlockManager(num_blocks=5, block_size=4)
    assert bm.allocate("a", 5) == [0, 1]
    assert bm.allocate("a", 8) == [0, 1]  # still fits in two blocks
    assert bm.allocate("a", 9) == [0, 1, 2]
    assert bm.blocks_needed("b", 9) == 3 and not bm.can_allocate("b", 9)
    with pytest.raises(AnnaError, match="out of KV blocks"):
        bm.allocate("b", 9)
    assert bm.table("b") == []  # a failed allocation takes nothing
    assert bm.allocate("b", 8) == [3, 4]
    assert [bm.ref_count(b) for b in range(5)] == [1] * 5
    bm.free("a")
    assert bm.num_free_blocks == 3 and bm.table("a") == [] and bm.ref_count(0) == 0
    bm.free("a")  # idempotent
    assert bm.num_used_blocks == 2


def test_state_pool_hands_out_each_slot_once():
    pool = StatePool(2)
    assert pool.allocate("a") == 0
    assert pool.allocate("a") == 0
    assert pool.allocate("b") == 1
    with pytest.raises(AnnaError, match="out of state slots"):
        pool.allocate("c")
    pool.free("a")
    assert pool.allocate("c") == 0 and pool.num_used_slots == 2


def test_prefill_chunks_and_decodes_share_a_step():
    sched, blocks, _ = make(max_prefill_tokens=10, prefill_chunk_size=6)
    a, b = req("a", 3), req("b", 14)
    sched.add(a)
    out = sched.schedule()
    assert [(s.request_id, s.start, len(s.token_ids), s.samples) for s in out.seqs] == [("a", 0, 3, True)]
    step(sched, out)
    sched.add(b)
    out = sched.schedule()  # a decodes, b starts its prompt in 6-token chunks
    assert [(s.request_id, s.start, s.token_ids, s.samples) for s in out.seqs] == [
        ("a", 3, [7], True), ("b", 0, [1, 2, 3, 4, 5, 6], False)]
    assert out.num_batched_tokens == 7 and not out.is_decode
    assert out.seqs[1].is_fresh and not out.seqs[0].is_fresh
    assert out.seqs[1].block_tables == [blocks.table("b")] and len(out.seqs[1].block_tables[0]) == 2
    step(sched, out)
    out = sched.schedule()
    assert [(s.request_id, s.start, len(s.token_ids), s.samples) for s in out.seqs] == [
        ("a", 4, 1, True), ("b", 6, 6, False)]
    step(sched, out)
    out = sched.schedule()  # 2 prompt tokens left, then b samples
    assert [(s.request_id, s.start, s.token_ids, s.samples) for s in out.seqs] == [
        ("a", 5, [7], True), ("b", 12, [13, 14], True)]
    assert out.seqs[0].state_slot != out.seqs[1].state_slot
    step(sched, out)
    assert b.output_token_ids == [7] and len(a.output_token_ids) == 4
    assert sched.schedule().is_decode


def test_token_budget_and_max_num_seqs_limit_admission():
    sched, _, _ = make(max_prefill_tokens=8, max_num_seqs=2)
    for rid in "abc":
        sched.add(req(rid, 3))
    out = sched.schedule()
    # a (3) + b (3) fill the sequence limit; c waits although budget is left
    assert [s.request_id for s in out.seqs] == ["a", "b"]
    assert [r.request_id for r in sched.waiting] == ["c"]
    sched2, _, _ = make(max_prefill_tokens=5, max_num_seqs=8)
    for rid in "ab":
        sched2.add(req(rid, 3))
    out = sched2.schedule()
    assert [(s.request_id, len(s.token_ids), s.samples) for s in out.seqs] == [("a", 3, True), ("b", 2, False)]


def test_finish_returns_blocks_and_slots_at_once():
    sched, blocks, slots = make()
    a, b = req("a", 9), req("b", 2)
    sched.add(a)
    sched.add(b)
    step(sched, sched.schedule())
    assert blocks.num_used_blocks == 3 + 1 and slots.num_used_slots == 2
    sched.finish(a, "abort")
    assert a.status is RequestStatus.FINISHED and a.finish_reason == "abort"
    assert blocks.num_used_blocks == 1 and slots.num_used_slots == 1
    assert sched.running == [b]
    c = req("c", 2)
    sched.add(c)
    sched.finish(c, "abort")  # a waiting request can be retired too
    assert not sched.waiting and blocks.num_used_blocks == 1


def test_preemption_frees_the_newest_and_resumes_it_by_recompute():
    # 4 blocks of 2 tokens: a (3 tokens) and b (3 tokens) take 2 blocks each.
    sched, blocks, _ = make(num_blocks=4, block_size=2, prefill_chunk_size=16)
    a, b = req("a", 3), req("b", 3)
    sched.add(a)
    sched.add(b)
    step(sched, sched.schedule(), token=50)  # both sample; 4 tokens each now -> still 2 blocks
    step(sched, sched.schedule(), token=51)  # decode position 3: fits
    assert blocks.num_free_blocks == 0
    out = sched.schedule()  # a needs a third block for position 4: b (newest) is preempted
    assert out.preempted == ["b"] and [s.request_id for s in out.seqs] == ["a"]
    assert b.status is RequestStatus.WAITING and b.num_computed_tokens == 0 and b.num_preemptions == 1
    assert list(sched.waiting) == [b] and sched.slots.slot("b") is None and blocks.table("b") == []
    assert sched.num_preemptions == 1
    step(sched, out, token=52)
    sched.finish(a, "length")
    out = sched.schedule()  # b resumes: prompt and its 2 generated tokens are computed again
    [s] = out.seqs
    assert (s.request_id, s.start, s.token_ids, s.samples) == ("b", 0, [1, 2, 3, 50, 51], True)
    assert s.is_fresh
    step(sched, out, token=53)
    assert b.output_token_ids == [50, 51, 53]


def test_a_lone_request_that_outgrows_the_cache_preempts_itself():
    sched, blocks, _ = make(num_blocks=2, block_size=2)
    a = req("a", 4)
    sched.add(a)
    step(sched, sched.schedule())
    out = sched.schedule()
    assert out.preempted == ["a"] and out.seqs == [] and list(sched.waiting) == [a]
    assert blocks.num_free_blocks == 2


def test_no_admission_in_a_step_that_preempted():
    sched, _, _ = make(num_blocks=3, block_size=2)
    a, b = req("a", 4), req("b", 1)
    sched.add(a)
    sched.add(b)
    step(sched, sched.schedule())  # a: 2 blocks, b: 1 block
    sched.add(req("c", 1))
    out = sched.schedule()  # a needs a block -> b preempted; c must not be admitted now
    assert out.preempted == ["b"]
    assert [r.request_id for r in sched.waiting] == ["b", "c"]


def test_config_rejects_nonpositive_limits():
    with pytest.raises(AnnaError, match="max_num_seqs"):
        EngineConfig(max_num_seqs=0)
    with pytest.raises(AnnaError, match="kv_cache_memory_gib"):
        EngineConfig(kv_cache_memory_gib=0)
