"""The scheduler with recurrent-state snapshots taken inside a prefill pass (``checkpoints_in_pass``) and the
snapshot index's pending entries: pure Python (no torch)."""

from anna_core.engine.prefix_cache import extend_hashes
from anna_core.engine.sched_output import ModelRunnerOutput, StepPath
from anna_core.engine.state_snapshots import SnapshotIndex

from tests.core import test_engine_prefix_cache as base
from tests.core.test_engine_prefix_cache import req, run_to_end


def ran(sampled):
    """The runner's output of a step that sampled ``sampled`` (request id -> token)."""
    return ModelRunnerOutput(StepPath.EAGER, sampled=sampled)

PROMPT = list(range(1, 30))  # 29 tokens; with block_size 4 and snapshot_interval 8: boundaries 8, 16, 24


def make(hybrid=True, in_pass=True, **cfg):
    """A hybrid scheduler taking snapshots inside the pass, every 8 tokens (the prefix-cache tests' helper)."""
    return base.make(hybrid=hybrid, in_pass=in_pass, **{"snapshot_interval": 8, **cfg})


def key_at(tokens, position, bs=4):
    """The snapshot key of the prefix ``tokens[:position]`` (the chain key of the block ending there)."""
    return extend_hashes([], lambda a, b: tokens[a:b], position // bs, bs)[position // bs - 1]


def step(sched, sampled_token=7):
    out = sched.schedule()
    sched.update(out, ran({s.request_id: sampled_token for s in out.seqs if s.samples}))
    return out


# -- the snapshot index's pending entries ----------------------------------------------------------

def test_pending_entries_are_invisible_until_committed_and_never_evicted():
    idx = SnapshotIndex(2)
    a = idx.reserve(b"a", pending=True)
    b = idx.reserve(b"b", pending=True)
    assert {a, b} == {0, 1} and idx.num_pending == 2 and len(idx) == 0
    assert idx.get(b"a") is None and idx.reserve(b"a", pending=True) is None and idx.reserve(b"a") is None
    assert idx.reserve(b"c") is None and idx.reserve(b"c", pending=True) is None  # full of pending: no eviction
    idx.commit(b"a")
    assert idx.get(b"a") == a and idx.num_pending == 1 and len(idx) == 1
    assert idx.reserve(b"c") == a and idx.get(b"a") is None  # a committed entry is evictable again
    idx.release(b"b")
    assert idx.num_pending == 0 and idx.get(b"b") is None and idx.reserve(b"d", pending=True) == b  # b's index reused
    idx.commit(b"zzz")  # neither pending nor present: no-ops
    idx.release(b"c")  # present but not pending: kept
    assert idx.get(b"c") == a and idx.num_pending == 1 and len(idx) == 1


# -- chunks spanning boundaries --------------------------------------------------------------------

def test_non_in_pass_scheduler_still_cuts_chunks_at_boundaries():
    sched, _ = make(in_pass=False)
    assert not sched.checkpoints_in_pass
    sched.add(req("a", PROMPT))
    [s] = sched.schedule().seqs
    assert (s.start, s.num_new_tokens, s.capture_snapshot, s.checkpoints) == (0, 8, True, [])
    # in-pass needs hybrid prefix caching with snapshots: otherwise the flag is dropped
    assert not make(hybrid=False)[0].checkpoints_in_pass and not make(num_snapshots=0)[0].checkpoints_in_pass
    assert not make(enable_prefix_caching=False)[0].checkpoints_in_pass and make()[0].checkpoints_in_pass


def test_one_chunk_spans_every_boundary_and_commits_its_snapshots_on_update():
    sched, _ = make()
    sched.add(req("a", PROMPT))
    out = sched.schedule()
    [s] = out.seqs
    assert (s.start, s.num_new_tokens, s.samples, s.capture_snapshot) == (0, 29, True, False)
    keys = [key_at(PROMPT, b) for b in (8, 16, 24)]
    assert s.checkpoints == [(8, 2, keys[0]), (16, 1, keys[1]), (24, 0, keys[2])]  # reserved deepest first
    snaps = sched.snapshots
    assert snaps.num_pending == 3 and len(snaps) == 0 and all(snaps.get(k) is None for k in keys)
    sched.update(out, ran({"a": 7}))
    assert snaps.num_pending == 0 and len(snaps) == 3 and [snaps.get(k) for k in keys] == [2, 1, 0]
    assert out.captures == []  # nothing for the engine to copy after the step
    outs = run_to_end(sched)
    assert all(s.checkpoints == [] for o in outs for s in o.seqs)  # decodes take no snapshot
    assert len(snaps) == 3 and snaps.num_pending == 0


def test_a_prompt_ending_at_a_boundary_captures_its_end_after_the_step():
    sched, _ = make()
    prompt = PROMPT[:24]
    sched.add(req("a", prompt))
    out = sched.schedule()
    [s] = out.seqs
    assert (s.start, s.num_new_tokens, s.capture_snapshot) == (0, 24, True)
    assert [(p, i) for p, i, _ in s.checkpoints] == [(8, 1), (16, 0)]  # strictly inside the chunk, deepest first
    sched.update(out, ran({"a": 7}))
    assert [(c.kind, c.index) for c in out.captures] == [("snapshot", 2)]  # 24: copied from the slot after the step
    assert [sched.snapshots.get(key_at(prompt, b)) for b in (8, 16, 24)] == [1, 0, 2]


def test_a_budget_cut_ends_the_chunk_at_a_boundary():
    sched, _ = make(max_prefill_tokens=20)
    sched.add(req("a", PROMPT))
    first = step(sched)
    [s] = first.seqs
    assert (s.start, s.num_new_tokens, s.capture_snapshot) == (0, 16, True)  # 20 cut back to the boundary 16
    assert [p for p, _, _ in s.checkpoints] == [8]
    assert [(c.kind, c.index) for c in first.captures] == [("snapshot", 1)]
    [s] = step(sched).seqs
    assert (s.start, s.num_new_tokens, s.capture_snapshot, s.samples) == (16, 13, False, True)
    assert [p for p, _, _ in s.checkpoints] == [24]
    assert len(sched.snapshots) == 3 and sched.snapshots.num_pending == 0


def test_a_chunk_size_cut_below_the_interval_then_ends_at_the_next_boundary():
    sched, _ = make(prefill_chunk_size=5)
    sched.add(req("a", PROMPT))
    [s] = step(sched).seqs
    assert (s.start, s.num_new_tokens, s.capture_snapshot, s.checkpoints) == (0, 5, False, [])
    [s] = step(sched).seqs  # starts between boundaries: ends at the next one, captured after the step
    assert (s.start, s.num_new_tokens, s.capture_snapshot, s.checkpoints) == (5, 3, True, [])


def test_abandon_releases_the_pending_entries():
    sched, _ = make()
    sched.add(req("a", PROMPT))
    out = sched.schedule()
    [s] = out.seqs
    reserved = [(p, i) for p, i, _ in s.checkpoints]
    assert reserved == [(8, 2), (16, 1), (24, 0)]
    sched.abandon(out)
    snaps = sched.snapshots
    assert snaps.num_pending == 0 and len(snaps) == 0
    assert all(snaps.get(k) is None for _, _, k in s.checkpoints)
    # rescheduled (the request was not advanced), the same boundaries are reserved again
    [again] = sched.schedule().seqs
    assert again.start == 0 and [(p, i) for p, i, _ in again.checkpoints] == [(8, 2), (16, 1), (24, 0)]
    assert snaps.num_pending == 3


def test_abandon_returns_every_pool_index():
    sched, _ = make(num_snapshots=3)
    sched.add(req("a", PROMPT))
    out = sched.schedule()
    assert [i for _, i, _ in out.seqs[0].checkpoints] == [2, 1, 0]
    sched.abandon(out)
    snaps = sched.snapshots
    assert snaps.num_pending == 0 and len(snaps) == 0
    assert sorted(snaps.reserve(bytes([n]), pending=True) for n in range(3)) == [0, 1, 2]
    assert snaps.reserve(b"more", pending=True) is None


def test_a_shared_prefix_resumes_from_a_snapshot_and_spans_the_next_boundary():
    sched, _ = make()
    sched.add(req("a", PROMPT))
    run_to_end(sched)
    assert len(sched.snapshots) == 3
    prompt = PROMPT[:22] + [90, 91, 92]  # 25 tokens; blocks match up to 20, the deepest snapshot within is 16
    sched.add(req("b", prompt))
    out = sched.schedule()
    [s] = out.seqs
    assert s.start == 16 and s.restore_snapshot == 1 and s.request.num_cached_tokens == 16
    assert s.num_new_tokens == 9 and s.samples and not s.capture_snapshot
    assert s.checkpoints == [(24, 3, key_at(prompt, 24))]  # a new prefix (tokens 20..23 differ from a's)
    sched.update(out, ran({"b": 7}))
    assert len(sched.snapshots) == 4 and sched.snapshots.get(key_at(prompt, 24)) == 3


def test_same_prompt_admitted_in_one_step_gets_no_hit_on_pending_snapshots():
    sched, _ = make()
    sched.add(req("a", PROMPT))
    sched.add(req("b", PROMPT))
    out = sched.schedule()
    a, b = out.seqs
    assert (a.request_id, a.start, a.num_new_tokens) == ("a", 0, 29)
    assert (b.request_id, b.start, b.num_new_tokens) == ("b", 0, 29)  # a's snapshots are pending: no hit
    assert b.restore_snapshot is None and b.request.num_cached_tokens == 0
    assert [p for p, _, _ in a.checkpoints] == [8, 16, 24] and b.checkpoints == []  # one writer per key
    sched.update(out, ran({"a": 7, "b": 7}))
    assert len(sched.snapshots) == 3 and sched.snapshots.num_pending == 0


def test_pending_entries_are_not_evicted_for_later_boundaries():
    sched, _ = make(num_snapshots=2)
    sched.add(req("a", PROMPT))
    out = sched.schedule()
    [s] = out.seqs
    keys = [key_at(PROMPT, b) for b in (8, 16, 24)]
    assert s.num_new_tokens == 29 and s.checkpoints == [(16, 1, keys[1]), (24, 0, keys[2])]  # 8 finds no room
    sched.update(out, ran({"a": 7}))
    snaps = sched.snapshots
    assert snaps.num_pending == 0 and len(snaps) == 2 and [snaps.get(k) for k in keys] == [None, 1, 0]


def test_a_request_finished_before_update_still_commits_its_written_snapshots():
    sched, blocks = make()
    a = req("a", PROMPT)
    sched.add(a)
    out = sched.schedule()
    sched.finish(a, "abort")  # e.g. the client went away while the step ran
    sched.update(out, ran({"a": 7}))
    assert sched.snapshots.num_pending == 0 and len(sched.snapshots) == 3
    assert a.num_computed_tokens == 0 and blocks.num_used_blocks == 0


def test_a_pool_smaller_than_the_boundaries_keeps_the_deepest_in_pass():
    """In-pass reservations never evict each other; they are made deepest first, so a one-entry pool keeps
    the deepest boundary, as snapshots copied after each cut chunk do (LRU)."""
    prompt = list(range(1, 20))  # 19 tokens: boundaries 8 and 16
    sched, _ = make(num_snapshots=1)
    sched.add(req("a", prompt))
    run_to_end(sched)
    assert len(sched.snapshots) == 1 and sched.snapshots.get(key_at(prompt, 16)) == 0
    assert sched.snapshots.get(key_at(prompt, 8)) is None
    sched.add(req("b", prompt[:18] + [77]))  # blocks match to 16: resumes there
    [s] = sched.schedule().seqs
    assert (s.start, s.restore_snapshot) == (16, 0)
    old, _ = make(num_snapshots=1, in_pass=False)
    old.add(req("a", prompt))
    run_to_end(old)
    old.add(req("b", prompt[:18] + [77]))
    [s] = old.schedule().seqs
    assert (s.start, s.restore_snapshot) == (16, 0)


def test_cached_blocks_do_not_resume_from_a_snapshot_still_pending_in_the_same_step():
    """The blocks of a finished request outlive its snapshots: a later request re-reserves them (pending) and
    a twin admitted in the same step finds the blocks but must not restore the entries not written yet."""
    sched, _ = make(num_snapshots=3)
    sched.add(req("x", PROMPT))
    run_to_end(sched)
    sched.add(req("y", [100 + t for t in PROMPT]))  # three new snapshots evict x's three
    run_to_end(sched)
    assert all(sched.snapshots.get(key_at(PROMPT, b)) is None for b in (8, 16, 24))
    sched.add(req("a", PROMPT))
    sched.add(req("b", PROMPT))
    out = sched.schedule()
    a, b = out.seqs
    assert a.start == 0 and [p for p, _, _ in a.checkpoints] == [8, 16, 24]
    assert sched.kv.groups[0].lookup([key_at(PROMPT, n) for n in (4, 8, 12, 16)]) != []  # x's blocks are still cached
    assert (b.start, b.restore_snapshot, b.checkpoints) == (0, None, [])
    sched.update(out, ran({"a": 7, "b": 7}))
    assert [sched.snapshots.get(key_at(PROMPT, n)) for n in (8, 16, 24)] == [i for _, i, _ in a.checkpoints]
