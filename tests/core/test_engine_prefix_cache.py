"""Prefix cache, snapshot index, prompt cache and their scheduler paths: pure Python (no torch)."""

import subprocess
import sys

import pytest
from anna_core.cache_spec import CacheSpec, FullAttentionSpec, RecurrentStateSpec
from anna_core.engine.block_manager import BlockManager
from anna_core.engine.cache_manager import CacheManager
from anna_core.engine.config import EngineConfig
from anna_core.engine.prefix_cache import extend_hashes, hash_block
from anna_core.engine.request import Request
from anna_core.engine.sampling_params import SamplingParams
from anna_core.engine.sched_output import ModelRunnerOutput, StepPath
from anna_core.engine.scheduler import Scheduler
from anna_core.engine.state_snapshots import PromptCache, SnapshotIndex
from anna_core.errors import AnnaError


def ran(sampled):
    """The runner's output of a step that sampled ``sampled`` (request id -> token)."""
    return ModelRunnerOutput(StepPath.EAGER, sampled=sampled)


def test_cache_modules_do_not_import_torch():
    code = ("import sys; import anna_core.engine.scheduler, anna_core.engine.block_manager, "
            "anna_core.engine.prefix_cache, anna_core.engine.state_snapshots, anna_core.engine.profiles, "
            "anna_core.engine.sched_output; "
            "assert 'torch' not in sys.modules, 'torch was imported'; print('ok')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def hashes_of(tokens, bs):
    return extend_hashes([], lambda a, b: tokens[a:b], len(tokens) // bs, bs)


def test_hash_chain_keys_depend_on_the_whole_prefix():
    bs = 4
    x = [1, 2, 3, 4]
    h = hashes_of(x + x + [9, 9, 9, 9] + x, bs)
    assert len(h) == 4 and len(set(h)) == 4  # the repeated block gets a different key each time
    assert h[0] == hash_block(b"", x) and h[1] == hash_block(h[0], x)
    assert hashes_of([7, 7, 7, 7] + x, bs)[1] != h[0]  # same tokens after another prefix: no alias
    assert hashes_of(x + x + [9, 9, 9, 9, 5], bs) == h[:3]  # the partial block is not keyed
    assert hash_block(b"", x, extra=b"img") != h[0]  # multimodal inputs change the key
    assert hash_block(b"", [1, 2]) != hash_block(b"", [1, 2, 0])


def test_block_manager_caches_released_blocks_and_evicts_lru():
    bm = BlockManager(num_blocks=4, block_size=2, enable_caching=True)
    assert bm.allocate("a", 4) == [0, 1]
    bm.register(0, b"k0")
    bm.register(1, b"k1")
    bm.register(1, b"other")  # a block is registered once
    bm.allocate("b", 2)  # block 2
    bm.register(2, b"k0")  # an equal block computed twice stays private
    bm.free("a")
    assert bm.num_free_blocks == 3 and bm.num_used_blocks == 1 and bm.num_cached_blocks == 2
    assert bm.lookup([b"k0", b"k1", b"k2"]) == [0, 1] and bm.lookup([b"k1"]) == [1]
    assert bm.num_evictable_among([0, 1, 2]) == 2
    assert bm.share("c", [0, 1]) == [0, 1] and bm.ref_count(0) == 1 and bm.num_free_blocks == 1
    with pytest.raises(AnnaError, match="already holds"):
        bm.share("c", [3])
    bm.free("c")
    bm.free("b")  # block 2 is unregistered: back to the plain free list
    # allocation takes never-cached blocks first, then the least recently released cached one
    assert bm.allocate("d", 6) == [3, 2, 1]
    assert bm.lookup([b"k0", b"k1"]) == [0] and bm.num_cached_blocks == 1  # k1 (block 1) evicted
    bm.free("d")


def test_pinned_blocks_survive_their_sequence_and_count_as_unused():
    bm = BlockManager(num_blocks=3, block_size=2)
    table = bm.allocate("a", 3)
    bm.pin(table)
    bm.free("a")
    assert bm.num_used_blocks == 0 and bm.num_free_blocks == 1 and bm.ref_count(table[0]) == 1
    bm.unpin(table)
    assert bm.num_free_blocks == 3
    with pytest.raises(AnnaError, match="pin free block"):
        bm.pin([0])


def test_snapshot_index_is_lru_with_a_fixed_pool():
    idx = SnapshotIndex(2)
    a = idx.reserve(b"a")
    b = idx.reserve(b"b")
    assert {a, b} == {0, 1} and idx.reserve(b"a") is None  # present: no copy, touched
    c = idx.reserve(b"c")  # evicts b (least recently used)
    assert c == b and idx.get(b"b") is None and idx.get(b"a") == a and idx.get(b"c") == c
    assert SnapshotIndex(0).reserve(b"x") is None


def test_prompt_cache_evicts_lru_and_hands_back_entries():
    pc = PromptCache(2)
    e1, ev = pc.insert((1, 2), [5])
    e2, _ = pc.insert((3,), [6])
    assert ev is None and pc.get((1, 2)) is e1  # touch (1, 2): (3,) is now the oldest
    e3, ev = pc.insert((4,), [7])
    assert ev is e2 and e3.store_idx == e2.store_idx and (3,) not in pc and len(pc) == 2
    assert pc.remove((4,)) is e3 and pc.pop_lru() is e1 and pc.pop_lru() is None


# -- the scheduler with caches -----------------------------------------------------------------

ATTENTION = CacheSpec((FullAttentionSpec(layers=[0], num_kv_heads=1, head_dim=1),))
HYBRID = CacheSpec((FullAttentionSpec(layers=[0], num_kv_heads=1, head_dim=1),
                    RecurrentStateSpec(layers=[1], conv_shape=(1, 1), state_shape=(1, 1, 1))))


def make(num_blocks=64, block_size=4, hybrid=False, num_snapshots=8, in_pass=False, **cfg):
    cfg = {"prefill_chunk_size": 1000, "prompt_cache_size": 0, **cfg}
    cfg.setdefault("max_prefill_tokens", 2048)  # what an engine on the CPU sets
    config = EngineConfig(block_size=block_size, num_blocks=num_blocks, **cfg)
    kv = CacheManager(HYBRID if hybrid else ATTENTION, num_blocks, block_size, config.max_num_seqs,
                      enable_caching=config.enable_prefix_caching, num_snapshots=num_snapshots,
                      snapshot_interval=config.snapshot_interval)
    sched = Scheduler(config, kv, checkpoints_in_pass=in_pass)
    return sched, kv.groups[0]


def req(rid, tokens, max_tokens=4):
    return Request(rid, list(tokens), SamplingParams(max_tokens=max_tokens))


def run_to_end(sched, token=7):
    """Step until nothing is left; retire requests at max_tokens. Returns every step's output."""
    outs = []
    while sched.has_unfinished():
        out = sched.schedule()
        outs.append(out)
        sampled = {s.request_id: token for s in out.seqs if s.samples}
        sampled.update({h.request_id: token for h in out.prompt_hits})
        for r in sched.update(out, ran(sampled)):
            if len(r.output_token_ids) >= r.params.max_tokens:
                sched.finish(r, "length")
    return outs


def test_attention_model_reuses_full_blocks_of_a_shared_prefix():
    sched, blocks = make()
    base = list(range(1, 23))  # 22 tokens: 5 full blocks
    sched.add(req("a", base))
    run_to_end(sched)
    sched.add(req("b", base[:18] + [50, 51]))  # shares 4 full blocks (16 tokens) + 2 tokens
    out = sched.schedule()
    [s] = out.seqs
    assert (s.start, s.token_ids) == (16, [17, 18, 50, 51]) and s.request.num_cached_tokens == 16
    assert out.cache_lookups == [(16, 20)] and s.restore_snapshot is None
    same = req("c", base)  # the whole prompt is cached: the last token is still computed
    sched.add(same)
    out = sched.schedule()
    assert [(x.request_id, x.start) for x in out.seqs if x.request_id == "c"] == [("c", 20)]
    assert blocks.table("c")[:5] == blocks.table("b")[:4] + [blocks.table("c")[4]]



def test_a_hit_leaves_a_residual_rings_length_to_compute():
    # --kv-cache-residual-len 6 over 4-token blocks: a 22-token prompt cached in 5 blocks resumes a re-run at 16
    # (22 - 6 = 16), not at 20, so the ring holds positions 16..21 computed by the request, as a miss's
    from anna_core.kv_quant.layout import TurboQuantLayout

    config = EngineConfig(block_size=4, num_blocks=64, prefill_chunk_size=1000, prompt_cache_size=0,
                          max_prefill_tokens=2048)
    for residual, resume in ((6, 16), (0, 20), (3, 16), (40, 0)):
        spec = CacheSpec((FullAttentionSpec(layers=[0], num_kv_heads=1, head_dim=8),))
        kv = CacheManager(spec.with_kv_quant(TurboQuantLayout(4, residual_len=residual)), 64, 4,
                          config.max_num_seqs, enable_caching=True)
        sched = Scheduler(config, kv)
        sched.add(req("a", range(1, 23)))
        run_to_end(sched)
        sched.add(req("b", range(1, 23)))
        assert [s.start for s in sched.schedule().seqs] == [resume], residual


def test_rings_keep_the_prompt_cache():
    # an exact repeat computes nothing: with a residual ring too it is a prompt-cache hit (the engine restores the
    # entry's rings into the new slot with its state, StateStore), its blocks pinned by the entry
    from anna_core.kv_quant.layout import TurboQuantLayout

    config = EngineConfig(block_size=4, num_blocks=64, prefill_chunk_size=1000, prompt_cache_size=2,
                          max_prefill_tokens=2048)
    spec = CacheSpec((FullAttentionSpec(layers=[0], num_kv_heads=1, head_dim=8),))
    for residual in (0, 6):
        kv = CacheManager(spec.with_kv_quant(TurboQuantLayout(4, residual_len=residual)), 64, 4, config.max_num_seqs,
                          enable_caching=True)
        sched = Scheduler(config, kv)
        sched.add(req("a", range(1, 11)))
        run_to_end(sched)
        assert kv.groups[0].num_free_blocks == 64 - 3
        sched.add(req("b", range(1, 11)))
        out = sched.schedule()
        assert len(out.prompt_hits) == 1 and out.seqs == [], residual


def test_a_repeated_block_inside_one_prompt_is_computed_not_reused():
    sched, blocks = make()
    x = [3, 1, 4, 1]
    sched.add(req("a", x * 4 + [9]))
    [s] = sched.schedule().seqs
    assert s.start == 0 and len(set(blocks.table("a"))) == 5  # four equal blocks, four physical blocks
    run_to_end(sched)
    sched.add(req("b", x * 2 + [2]))  # matches a's first two blocks only
    [s] = sched.schedule().seqs
    assert s.start == 8


def test_hybrid_hits_resume_from_the_deepest_snapshot_and_chunks_end_at_boundaries():
    sched, _ = make(hybrid=True, snapshot_interval=8)
    prompt = list(range(1, 30))  # 29 tokens: boundaries at 8, 16, 24
    sched.add(req("a", prompt))
    outs = run_to_end(sched)
    prefill = [(s.start, s.num_new_tokens, s.capture_snapshot) for s in outs[0].seqs + outs[1].seqs + outs[2].seqs
               + outs[3].seqs]
    assert prefill == [(0, 8, True), (8, 8, True), (16, 8, True), (24, 5, False)]
    assert sum(len(o.captures) for o in outs) == 3 and len(sched.snapshots) == 3
    # a new prompt sharing 22 tokens: blocks cover 20, the deepest snapshot within them is at 16
    sched.add(req("b", prompt[:22] + [90, 91, 92]))
    [s] = sched.schedule().seqs
    assert s.start == 16 and s.restore_snapshot is not None and s.request.num_cached_tokens == 16
    assert s.num_new_tokens == 8 and s.capture_snapshot  # up to the next boundary (24 <= 25)


def test_hybrid_without_a_snapshot_computes_everything():
    sched, _ = make(hybrid=True, snapshot_interval=8, num_snapshots=1)
    prompt = list(range(1, 20))
    sched.add(req("a", prompt))
    run_to_end(sched)
    assert len(sched.snapshots) == 1  # only the deepest kept (16)
    sched.add(req("b", prompt[:12] + [77] * 6))  # blocks match to 12, but no snapshot at 8 any more
    [s] = sched.schedule().seqs
    assert s.start == 0 and s.restore_snapshot is None


def test_prompt_cache_hit_computes_nothing_and_copies_the_tail_block():
    sched, blocks = make(prompt_cache_size=2)
    prompt = list(range(1, 11))  # 10 tokens: blocks of 4, 4, 2
    sched.add(req("a", prompt))
    outs = run_to_end(sched)
    assert [c.kind for o in outs for c in o.captures] == ["prompt"]
    assert blocks.num_used_blocks == 0 and blocks.num_free_blocks == 61  # three blocks pinned
    sched.add(req("b", prompt))
    out = sched.schedule()
    assert out.seqs == [] and len(out.prompt_hits) == 1 and out.cache_lookups == [(10, 10)]
    hit = out.prompt_hits[0]
    entry = hit.entry
    assert hit.block_tables[0][:2] == entry.blocks[0][:2]
    assert hit.tail_copies == [(0, entry.blocks[0][2], hit.block_tables[0][2])]
    assert hit.request.num_computed_tokens == 10 and hit.request.num_cached_tokens == 10
    sched.update(out, ran({"b": 5}))
    [s] = sched.schedule().seqs  # next step decodes position 10 into its own tail block
    assert (s.start, s.token_ids) == (10, [5])


def test_prompt_cache_entries_are_dropped_before_anyone_is_preempted():
    sched, blocks = make(num_blocks=6, prompt_cache_size=2, enable_prefix_caching=False)
    sched.add(req("a", list(range(1, 10)), max_tokens=1))  # 9 tokens -> 3 blocks pinned
    run_to_end(sched)
    assert blocks.num_free_blocks == 3 and len(sched.prompt_cache) == 1
    sched.add(req("b", list(range(20, 36)), max_tokens=2))  # needs 4 blocks, then 5
    outs = run_to_end(sched)
    assert not any(o.preempted for o in outs)
    assert tuple(range(1, 10)) not in sched.prompt_cache and tuple(range(20, 36)) in sched.prompt_cache
    assert blocks.num_used_blocks == 0 and blocks.num_free_blocks == 2  # b's 4 prompt blocks pinned


def test_preempted_request_reuses_its_own_cached_blocks():
    sched, _ = make(num_blocks=6, block_size=2)
    a, b = req("a", [1, 2, 3, 4, 5], max_tokens=10), req("b", [9, 8, 7, 6, 5], max_tokens=10)
    sched.add(a)
    sched.add(b)
    preempted = []
    while not preempted:
        out = sched.schedule()
        preempted = out.preempted
        sched.update(out, ran({s.request_id: 7 for s in out.seqs if s.samples}))
    assert preempted == ["b"]
    sched.finish(a, "abort")
    [s] = sched.schedule().seqs
    assert s.request_id == "b" and s.start > 0  # resumed from its own blocks still in the cache
