"""Cache groups: full attention, a sliding window of another head_dim, KV sharing and a recurrent group in
one model (anna_core.testing.cache_groups_model), run by the real engine against a cache-free reference."""

import pytest
import torch
from anna_core.cache_spec import CacheSpec, FullAttentionSpec, RecurrentStateSpec, SlidingWindowSpec
from anna_core.engine.block_manager import BlockManager
from anna_core.engine.cache_allocator import group_block_caps, plan_num_blocks
from anna_core.engine.config import EngineConfig
from anna_core.engine.llm_engine import LLMEngine
from anna_core.engine.sampling_params import SamplingParams
from anna_core.errors import AnnaError
from anna_core.model import ModelCapabilities
from anna_core.testing.cache_groups_model import CacheGroupsLM
from anna_core.testing.engine_run import run_to_completion

WINDOW, BS = 8, 4
MAX_HELD = -(-WINDOW // BS) + 1  # ceil(window / block_size) + 1


@pytest.fixture(scope="module")
def model():
    return CacheGroupsLM(window=WINDOW)


def prompt(seed, n):
    return torch.randint(0, 64, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def engine(model, **cfg):
    cfg = {"block_size": BS, "num_blocks": 128, "max_num_seqs": 4, "max_prefill_tokens": 64,
           "enable_prefix_caching": False, "prompt_cache_size": 0, "snapshot_interval": 8, **cfg}
    return LLMEngine(model, config=EngineConfig(**cfg))


def greedy(n, logprobs=None):
    return SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True, logprobs=logprobs)


def run(eng, prompts, params, prefix="r"):
    """run_to_completion, each final output carrying every generated token's logprob."""
    lps = {}
    outs = run_to_completion(eng, prompts, params, prefix=prefix,
                             on_output=lambda o: lps.setdefault(o.request_id, []).extend(o.logprobs))
    for o in outs:
        o.logprobs = lps[o.request_id]
    return outs


def assert_matches_reference(model, prompt_ids, out, n):
    """Greedy tokens equal the cache-free reference's, and so do the generated tokens' log-probabilities."""
    assert out.token_ids == model.reference_greedy(prompt_ids, n), out.error
    ref = torch.log_softmax(model.reference_logits(prompt_ids + out.token_ids[:-1])[len(prompt_ids) - 1:], -1)
    got = torch.tensor([lp.logprob for lp in out.logprobs])
    want = ref.gather(1, torch.tensor(out.token_ids)[:, None])[:, 0]
    torch.testing.assert_close(got, want, rtol=0, atol=1e-4)


def test_specs_validate_groups_and_name_each_layers_tensors():
    spec = CacheGroupsLM(window=WINDOW).cache_spec
    assert [g.kind for g in spec.groups] == ["full_attention", "sliding_window", "recurrent"]
    assert spec.attention_groups == [0, 1] and spec.state_group == 2
    assert [spec.group_of(i) for i in range(4)] == [0, 1, 0, 2]
    assert spec.groups[0].cache_index(2) == spec.groups[0].cache_index(0) == 0  # layer 2 reads layer 0's K/V
    assert spec.groups[1].max_blocks_per_seq(1000, BS) == MAX_HELD
    with pytest.raises(AnnaError, match="owner"):
        FullAttentionSpec(layers=[0], num_kv_heads=1, head_dim=8, shared={2: 1})
    with pytest.raises(AnnaError, match="two cache groups"):
        CacheSpec((FullAttentionSpec(layers=[0], num_kv_heads=1, head_dim=8),
                   SlidingWindowSpec(layers=[0], num_kv_heads=1, head_dim=8, window=4)))
    rec = RecurrentStateSpec(layers=[5], conv_shape=(2, 3), state_shape=(1, 2, 2))
    with pytest.raises(AnnaError, match="at most one recurrent"):
        CacheSpec((rec, RecurrentStateSpec(layers=[6], conv_shape=(2, 3), state_shape=(1, 2, 2))))
    with pytest.raises(AnnaError, match="no K/V"):
        spec.groups[0].cache_index(1)


def test_memory_plan_stops_the_window_group_at_its_cap():
    spec = CacheGroupsLM(window=WINDOW).cache_spec
    caps = group_block_caps(spec, BS, max_len=1024, max_num_seqs=2, max_prefill_tokens=16)
    assert caps == [2 * 256, 2 * MAX_HELD + 4]  # full: every token; window: the window plus one step's chunk
    per = [spec.groups[g].bytes_per_block(BS, torch.float32) for g in spec.attention_groups]
    budget = 100 * per[0] + caps[1] * per[1]
    assert plan_num_blocks(spec, BS, torch.float32, budget, caps) == [100, caps[1]]
    small = plan_num_blocks(spec, BS, torch.float32, 3 * (per[0] + per[1]), caps)
    assert small == [3, 3]
    with pytest.raises(AnnaError, match="holds no block"):
        plan_num_blocks(spec, BS, torch.float32, per[0], caps)


def test_block_manager_drops_blocks_behind_a_window_but_keeps_them_cached():
    bm = BlockManager(8, BS, enable_caching=True)
    table = list(bm.allocate("a", 16))
    for i, b in enumerate(table):
        bm.register(b, bytes([i]))
    assert bm.drop_before("a", 2) == 2 and bm.num_held("a") == 2
    assert bm.table("a")[:2] == [bm.null_block] * 2 and bm.num_free_blocks == 6  # dropped: evictable
    assert bm.cached_block(bytes([0])) == table[0]
    bm.free("a")
    assert bm.num_free_blocks == 8 and bm.num_used_blocks == 0


def test_one_sequence_matches_the_cache_free_reference_and_the_window_group_stays_small(model):
    eng = engine(model)
    p = prompt(1, 10)
    n = 4 * WINDOW  # a generation four windows long
    eng.add_request("r", p, greedy(n, logprobs=0))
    held, final, logprobs = [], None, []
    while eng.has_unfinished():
        for final in eng.step():
            logprobs += final.logprobs
        if eng.scheduler.running:
            held.append(eng.kv.groups[1].num_held("r"))
            assert eng.kv.groups[0].num_held("r") == -(-eng.scheduler.running[0].num_computed_tokens // BS)
    final.logprobs = logprobs
    assert_matches_reference(model, p, final, n)
    assert max(held) <= MAX_HELD and len(held) >= n - 1
    assert eng.kv.num_used_blocks == 0 and eng.kv.slots.num_used_slots == 0


def test_batched_chunked_equals_single_whole(model):
    prompts = [prompt(2, 13), prompt(3, 5), prompt(4, 21)]
    ref = [model.reference_greedy(p, 12) for p in prompts]
    batched = run(engine(model, prefill_chunk_size=4), prompts, greedy(12, logprobs=0))
    for p, o in zip(prompts, batched):
        assert_matches_reference(model, p, o, 12)
    for p, r in zip(prompts, ref):
        alone = run_to_completion(engine(model, max_num_seqs=1), [p], greedy(12))[0]
        assert alone.token_ids == r


def test_prefix_hit_equals_miss_and_resumes_where_every_group_can(model):
    shared = prompt(5, 18)
    a, b = shared + prompt(6, 3), shared + prompt(7, 5)
    eng = engine(model, enable_prefix_caching=True, num_snapshots=8)
    first = run(eng, [a], greedy(6, logprobs=0))[0]
    second = run(eng, [b], greedy(6, logprobs=0), prefix="s")[0]
    # resumes at 16: a multiple of the snapshot interval with the window's blocks (positions 9..15) cached
    assert first.num_cached_tokens == 0 and second.num_cached_tokens == 16
    assert_matches_reference(model, a, first, 6)
    assert_matches_reference(model, b, second, 6)
    assert eng.kv.num_used_blocks == 0


def test_prefix_hit_misses_when_the_window_blocks_were_evicted(model):
    shared = prompt(8, 18)
    eng = engine(model, enable_prefix_caching=True, num_snapshots=8)
    run_to_completion(eng, [shared + [1, 2]], greedy(2))
    sliding = eng.kv.groups[1]
    window_keys = list(eng.scheduler.prompt_cache or [])  # no prompt cache: empty
    assert window_keys == []
    # evict every cached block of the sliding group: no point can serve the window any more
    taken = sliding.allocate("hog", sliding.num_free_blocks * BS)
    assert len(taken) > 0 and sliding.num_cached_blocks == 0
    sliding.free("hog")
    out = run_to_completion(eng, [shared + [3, 4]], greedy(4), prefix="s")[0]
    assert out.num_cached_tokens == 0 and out.token_ids == model.reference_greedy(shared + [3, 4], 4)


def test_prompt_cache_hit_copies_every_groups_tail_block(model):
    p = prompt(9, 14)  # ends inside a block
    eng = engine(model, enable_prefix_caching=True, num_snapshots=8, prompt_cache_size=2)
    first = run_to_completion(eng, [p], greedy(5))[0]
    again = run_to_completion(eng, [p], greedy(5), prefix="s")[0]
    assert again.num_cached_tokens == len(p) and first.token_ids == again.token_ids == model.reference_greedy(p, 5)


def test_preemption_with_a_small_cache_keeps_outputs(model):
    prompts = [prompt(10 + i, 9 + 3 * i) for i in range(4)]
    eng = engine(model, num_blocks=20, max_prefill_tokens=32)
    outs = run_to_completion(eng, prompts, greedy(10))
    assert [o.token_ids for o in outs] == [model.reference_greedy(p, 10) for p in prompts]
    assert eng.kv.num_used_blocks == 0


def test_a_model_without_caches_gets_no_prefix_hits():
    from anna_core.cache_spec import CacheSpec
    from anna_core.engine.cache_manager import CacheManager
    from anna_core.engine.request import Request

    kv = CacheManager(CacheSpec(), [], BS, 2, enable_caching=True)
    assert not kv.enable_caching
    assert kv.prefix_hit(Request("r", list(range(20)), greedy(1))).num_tokens == 0


class SlidingOnly(torch.nn.Module):
    """A model with one sliding-window group and nothing else (nothing bounds its max_model_len)."""

    vocab_size = 64
    capabilities = ModelCapabilities()
    cache_spec = CacheSpec((SlidingWindowSpec(layers=[0], num_kv_heads=1, head_dim=4, window=WINDOW),))

    def forward(self, batch, caches):
        return torch.zeros(batch.num_tokens, 1)

    def compute_logits(self, hidden):
        return torch.zeros(hidden.shape[0], self.vocab_size)


def test_the_engine_refuses_a_window_pool_too_small_for_one_sequence(model):
    with pytest.raises(AnnaError, match="sliding window of 8 tokens.* has 2 blocks of 4 tokens; one sequence needs 3"):
        engine(SlidingOnly(), num_blocks=2)
    assert engine(SlidingOnly(), num_blocks=MAX_HELD).kv.groups[0].num_blocks == MAX_HELD
    # with a full-attention group beside it, a small pool caps max_model_len instead
    assert engine(model, num_blocks=2).max_model_len == 2 * BS


def test_the_engine_checks_each_attention_layer_against_its_group():
    bad = CacheGroupsLM(window=WINDOW)
    bad.sliding.attn.sliding_window = 2  # the layer reads 2 back, the group keeps 8
    with pytest.raises(AnnaError, match="sliding.attn: sliding_window 2, but cache group 1"):
        engine(bad)
    bad = CacheGroupsLM(window=WINDOW)
    bad.full.attn.group = 2  # the recurrent group
    with pytest.raises(AnnaError, match="full.attn: cache group 2 is not an attention group"):
        engine(bad)
    with pytest.raises(AnnaError, match="reads two layers"):
        FullAttentionSpec(layers=[0, 1], num_kv_heads=1, head_dim=8, shared=[(2, 0), (2, 1)])


REFS: dict = {}


def _reference(window, prompt_ids, n):
    key = (window, tuple(prompt_ids))
    if len(REFS.get(key, ())) < n:
        REFS[key] = CacheGroupsLM(window=window).reference_greedy(list(prompt_ids), n)
    return REFS[key][:n]


@pytest.mark.parametrize("seed", range(8))
def test_random_workloads_match_the_reference_and_return_every_block(seed):
    """Random windows, block sizes, chunking, batch sizes, tiny pools (preemption), prefix and prompt caching
    with shared prefixes and exact repeats, staggered arrivals and an abort: every request's tokens are the
    reference's (a prefix of them when cut off), the window group stays within its bound after every step,
    and every block and slot is returned."""
    import random

    rng = random.Random(seed)
    window, bs = rng.choice([1, 3, 4, 8, 13]), rng.choice([2, 4, 8])
    cfg = dict(block_size=bs, max_num_seqs=rng.choice([1, 2, 3, 5]), max_prefill_tokens=rng.choice([8, 13, 32]),
               prefill_chunk_size=rng.choice([0, 1, 3, 5]), enable_prefix_caching=rng.random() < 0.8,
               snapshot_interval=bs * rng.choice([1, 2]), num_snapshots=rng.choice([1, 2, 8]),
               prompt_cache_size=rng.choice([0, 2]), num_blocks=rng.choice([12, 20, 64]), max_model_len=48)
    model = CacheGroupsLM(window=window)
    eng = LLMEngine(model, config=EngineConfig(**cfg))
    shared = [rng.randrange(64) for _ in range(24)]
    prompts = []
    for _ in range(6):
        if prompts and rng.random() < 0.25:
            prompts.append(list(rng.choice(prompts)))  # an exact repeat
        else:
            prompts.append(shared[:rng.randint(0, 24)] + [rng.randrange(64) for _ in range(rng.randint(1, 6))])
    n_new = [rng.randint(1, 10) for _ in prompts]
    aborted = rng.randrange(len(prompts))
    bound = -(-window // bs) + 1
    tokens: dict[str, list[int]] = {}
    step = 0
    while step < 400 and (step < 2 * len(prompts) or eng.has_unfinished()):
        if step % 2 == 0 and step // 2 < len(prompts):  # staggered arrivals
            i = step // 2
            eng.add_request(f"r{i}", prompts[i], greedy(n_new[i]))
        if step == 5:
            eng.abort_request(f"r{aborted}")
        for out in eng.step():
            tokens.setdefault(out.request_id, []).extend(out.delta_token_ids)
        for r in eng.scheduler.running:
            assert eng.kv.groups[1].num_held(r.request_id) <= bound
        step += 1
    assert not eng.has_unfinished(), "the engine made no progress"
    for i, (p, n) in enumerate(zip(prompts, n_new)):
        got = tokens.get(f"r{i}", [])
        want = _reference(window, p, n)
        if i == aborted:
            assert got == want[:len(got)]
        else:
            assert got == want[:len(got)] and (len(got) == n or len(p) + len(got) >= eng.max_model_len), (i, got, want)
    assert eng.kv.num_used_blocks == 0 and eng.kv.slots.num_used_slots == 0


def test_the_scratch_slot_is_the_last_one_also_without_recurrent_state():
    """Padded rows of a captured step write the scratch slot: with attention groups only it is still the slot past
    ``num_slots`` (a model's own per-slot tables, e.g. the speech talker's, hold it), never slot 0, a sequence's."""
    from anna_core.engine.cache_allocator import allocate_caches, scratch_slot

    attention = CacheSpec((FullAttentionSpec(layers=range(2), num_kv_heads=1, head_dim=4),))
    recurrent = CacheSpec((FullAttentionSpec(layers=[0], num_kv_heads=1, head_dim=4),
                           RecurrentStateSpec(layers=[1], conv_shape=(4, 3), state_shape=(1, 2, 2))))
    for spec in (attention, recurrent):
        caches = allocate_caches(spec, num_blocks=3, block_size=4, num_slots=5, device="cpu", dtype=torch.float32)
        assert caches.num_slots == 6 and scratch_slot(caches) == 5
