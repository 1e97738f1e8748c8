"""Multimodal inputs (anna_core.multimodal): media spliced in at placeholder tokens, three position rows,
media in the prefix-cache and prompt-cache keys, the encoder budget and cache, and the graph paths, run by
the real engine on anna_core.testing.multimodal_model against its cache-free reference."""

import pytest
import torch
from anna_core.engine import model_runner
from anna_core.engine.config import EngineConfig
from anna_core.engine.encoder_cache import EncoderCacheManager
from anna_core.engine.llm_engine import LLMEngine
from anna_core.engine.model_runner import RunnerConfig
from anna_core.engine.sampling_params import SamplingParams
from anna_core.errors import AnnaError, InvalidRequestError
from anna_core.multimodal import MediaItem, MultiModalInputs, media_hash
from anna_core.testing.cache_groups_model import CacheGroupsLM
from anna_core.testing.fake_graphs import FakeGraphAccelerator
from anna_core.testing.multimodal_model import PLACEHOLDER, MultiModalLM, grid_positions, image

BS = 4


@pytest.fixture
def model():
    return MultiModalLM(window=8)


def engine(model, **cfg):
    cfg = {"block_size": BS, "num_blocks": 128, "max_num_seqs": 4, "max_prefill_tokens": 64,
           "enable_prefix_caching": True, "prompt_cache_size": 0, "snapshot_interval": 4, **cfg}
    return LLMEngine(model, config=EngineConfig(**cfg))


def greedy(n):
    return SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True, logprobs=0)


def run(eng, requests, n=5, params=None):
    """Add ``(prompt, multimodal)`` requests, step to completion; final outputs (all logprobs) in order."""
    for i, (prompt, mm) in enumerate(requests):
        eng.add_request(f"r{i}", prompt, params or greedy(n), multimodal=mm)
    final, lps = {}, {}
    for _ in range(2000):  # a stalled request fails the test instead of hanging it
        if not eng.has_unfinished():
            break
        for out in eng.step():
            lps.setdefault(out.request_id, []).extend(out.logprobs)
            if out.finished:
                out.logprobs = lps[out.request_id]
                final[out.request_id] = out
    return [final[f"r{i}"] for i in range(len(requests))]


def check(model, prompt, mm, out, n=5):
    """Greedy tokens and their log-probabilities equal the cache-free reference's."""
    assert out.error is None, out.error
    assert out.token_ids == model.reference_greedy(prompt, n, mm)
    ref = torch.log_softmax(model.reference_logits(prompt + out.token_ids[:-1], mm, len(prompt))[len(prompt) - 1:], -1)
    want = ref.gather(1, torch.tensor(out.token_ids)[:, None])[:, 0]
    torch.testing.assert_close(torch.tensor([lp.logprob for lp in out.logprobs]), want, rtol=0, atol=1e-4)


def mm_prompt(seed, offset=5, length=6, tail=5):
    """A prompt with one medium: text, ``length`` placeholders at ``offset``, text."""
    text = torch.randint(4, 64, (offset + tail,), generator=torch.Generator().manual_seed(100)).tolist()
    prompt = text[:offset] + [PLACEHOLDER] * length + text[offset:]
    return prompt, grid_positions(len(prompt), [image(seed, offset, length)])


def test_different_media_behind_the_same_placeholders_never_share_blocks(model):
    eng = engine(model)
    prompt, mm_a = mm_prompt(seed=1)
    _, mm_b = mm_prompt(seed=2)
    assert mm_a.items[0].content_hash != mm_b.items[0].content_hash
    [a] = run(eng, [(prompt, mm_a)])
    [b] = run(eng, [(prompt, mm_b)])
    check(model, prompt, mm_a, a)
    check(model, prompt, mm_b, b)
    assert b.num_cached_tokens == 4  # only the text block before the image is shared
    lp = lambda o: torch.tensor([x.logprob for x in o.logprobs])  # noqa: E731
    assert a.token_ids != b.token_ids or (lp(a) - lp(b)).abs().max() > 1e-2  # the image changes the output
    [again] = run(eng, [(prompt, mm_a)])
    assert again.num_cached_tokens == (len(prompt) - 1) // BS * BS  # the same image: every full block hits
    assert again.token_ids == a.token_ids
    check(model, prompt, mm_a, again)


def test_a_prompt_that_starts_with_a_medium_gets_no_hit_from_another_medium(model):
    eng = engine(model)
    prompt, mm_a = mm_prompt(seed=1, offset=0, length=8, tail=6)
    _, mm_b = mm_prompt(seed=2, offset=0, length=8, tail=6)
    [a] = run(eng, [(prompt, mm_a)])
    [b] = run(eng, [(prompt, mm_b)])
    assert b.num_cached_tokens == 0
    [again] = run(eng, [(prompt, mm_b)])
    assert again.num_cached_tokens == 12 and again.token_ids == b.token_ids
    check(model, prompt, mm_a, a)
    check(model, prompt, mm_b, b)


def test_prompt_cache_keys_include_the_media(model):
    eng = engine(model, prompt_cache_size=4)
    prompt, mm_a = mm_prompt(seed=1)
    _, mm_b = mm_prompt(seed=2)
    plain = SamplingParams(temperature=0.0, max_tokens=5, ignore_eos=True)  # no logprobs: raw logits are kept
    [a] = run(eng, [(prompt, mm_a)], params=plain)
    [b] = run(eng, [(prompt, mm_b)], params=plain)
    assert b.num_cached_tokens < len(prompt)  # no exact-prompt hit with another image
    [again] = run(eng, [(prompt, mm_a)], params=plain)
    assert again.num_cached_tokens == len(prompt) and again.token_ids == a.token_ids  # exact hit
    assert a.token_ids == model.reference_greedy(prompt, 5, mm_a)
    assert b.token_ids == model.reference_greedy(prompt, 5, mm_b)


@pytest.mark.parametrize("chunk", [1, 3, 4, 7])
def test_a_chunked_multimodal_prefill_equals_one_pass(model, chunk):
    prompt, mm = mm_prompt(seed=3, offset=2, length=9, tail=6)
    [whole] = run(engine(model, enable_prefix_caching=False), [(prompt, mm)])
    before = model.num_encoded
    [chunked] = run(engine(model, enable_prefix_caching=False, prefill_chunk_size=chunk), [(prompt, mm)])
    assert model.num_encoded - before == 1  # encoded once, read by every chunk that covers it
    assert chunked.token_ids == whole.token_ids
    torch.testing.assert_close(torch.tensor([lp.logprob for lp in chunked.logprobs]),
                               torch.tensor([lp.logprob for lp in whole.logprobs]), rtol=0, atol=1e-5)
    check(model, prompt, mm, chunked)


def test_batched_media_requests_and_text_match_the_reference(model):
    p1, mm1 = mm_prompt(seed=4, offset=1, length=5, tail=3)
    p2, mm2 = mm_prompt(seed=5, offset=6, length=3, tail=8)
    p3 = list(range(10, 23))
    two = [image(6, 0, 4, "audio"), image(7, 8, 2)]
    p4 = [PLACEHOLDER] * 4 + [9, 9, 9, 9] + [PLACEHOLDER] * 2 + [11, 12]
    mm4 = grid_positions(len(p4), two)
    outs = run(engine(model), [(p1, mm1), (p2, mm2), (p3, None), (p4, mm4)])
    for (p, mm), out in zip([(p1, mm1), (p2, mm2), (p3, None), (p4, mm4)], outs):
        check(model, p, mm, out)


def test_the_encoder_budget_spreads_media_over_steps(model):
    two = [image(8, 2, 6), image(9, 10, 6)]
    prompt = [20, 21] + [PLACEHOLDER] * 6 + [22, 23] + [PLACEHOLDER] * 6 + [24, 25, 26]
    mm = grid_positions(len(prompt), two)
    eng = engine(model, max_encoder_tokens=6, encoder_cache_tokens=6, enable_prefix_caching=False)
    eng.add_request("r", prompt, greedy(4), multimodal=mm)
    first = eng.scheduler.schedule()
    assert [s.num_new_tokens for s in first.seqs] == [10]  # stops before the second image
    assert [m.content_hash for m in first.encoder_inputs] == [two[0].content_hash]
    eng.scheduler.abandon(first)
    eng2 = engine(model, max_encoder_tokens=6, encoder_cache_tokens=6, enable_prefix_caching=False)
    [out] = run(eng2, [(prompt, mm)], n=4)
    check(model, prompt, mm, out, n=4)
    assert eng2.scheduler.encoder_cache.num_used == 0 and not eng2.runner.encoder.outputs  # all released


def test_the_same_image_in_two_requests_is_encoded_once(model):
    prompt, mm = mm_prompt(seed=10)
    other = [30, 31] + prompt[2:]
    before = model.num_encoded
    outs = run(engine(model, enable_prefix_caching=False), [(prompt, mm), (other, mm)])
    assert model.num_encoded - before == 1
    check(model, prompt, mm, outs[0])
    check(model, other, mm, outs[1])


def test_a_prefix_hit_inside_a_medium_encodes_it_again(model):
    eng = engine(model)
    prompt, mm = mm_prompt(seed=11, offset=3, length=9, tail=2)  # the image spans blocks 0..2
    [a] = run(eng, [(prompt, mm)])
    # same text and image, then more text: the hit resumes inside the image's blocks or after them
    longer = prompt + [40, 41, 42, 43, 44]
    mm_longer = grid_positions(len(longer), list(mm.items))
    [b] = run(eng, [(longer, mm_longer)])
    assert b.num_cached_tokens >= 8
    check(model, prompt, mm, a)
    check(model, longer, mm_longer, b)


def test_preempted_media_requests_recompute_the_same_tokens(model):
    reqs = [mm_prompt(seed=s, offset=2 + s % 3, length=5, tail=6) for s in range(12, 16)]
    outs = run(engine(model, num_blocks=18, enable_prefix_caching=False), reqs, n=12)
    for (p, mm), out in zip(reqs, outs):
        check(model, p, mm, out, n=12)


def test_prefill_and_decode_graphs_stage_media_and_positions(model, monkeypatch):
    monkeypatch.setattr(model_runner, "prefill_buckets", lambda n: [b for b in (8, 16, 24) if b <= n])
    prompt, mm = mm_prompt(seed=17, offset=3, length=6, tail=4)
    text = list(range(5, 19))
    eng = engine(model, enable_prefix_caching=False, max_model_len=64, async_scheduling=True)
    eng.runner.accel = FakeGraphAccelerator()
    eng.runner.setup(RunnerConfig(), max_model_len=eng.max_model_len, max_num_seqs=4, max_prefill_tokens=64)
    assert eng.runner.prefill_graphs is not None and eng.runner.graphs is not None
    [a] = run(eng, [(prompt, mm)], n=6)
    [t] = run(eng, [(text, None)], n=6)
    assert eng.runner.num_prefill_graph_steps == 2 and eng.runner.num_graph_steps >= 8
    check(model, prompt, mm, a, n=6)
    check(model, text, None, t, n=6)


def test_bad_media_get_a_clear_error(model):
    eng = engine(model)
    prompt, mm = mm_prompt(seed=1)
    item = mm.items[0]
    cases = [
        (MultiModalInputs([MediaItem("video", item.offset, item.length, item.content_hash, item.data)]), "video"),
        (MultiModalInputs([MediaItem("image", 10, 8, b"x", None)]), "outside"),
        (MultiModalInputs([item, MediaItem("image", item.offset + 1, 2, b"y", None)]), "overlaps"),
        (MultiModalInputs([item], positions=[[0] * len(prompt)]), "3 rows"),
        (MultiModalInputs([MediaItem("image", item.offset, item.length, b"", None)]), "content_hash"),
    ]
    for bad, match in cases:
        with pytest.raises(InvalidRequestError, match=match):
            eng.add_request("bad", prompt, greedy(2), multimodal=bad)
    small = engine(model, max_encoder_tokens=4)
    with pytest.raises(InvalidRequestError, match="max_encoder_tokens"):
        small.add_request("big", prompt, greedy(2), multimodal=mm)
    text_only = LLMEngine(CacheGroupsLM(), config=EngineConfig(block_size=BS, num_blocks=32, prompt_cache_size=0))
    with pytest.raises(InvalidRequestError, match="text only"):
        text_only.add_request("t", prompt, greedy(2), multimodal=mm)
    assert not eng.has_unfinished()


def test_a_wrong_encoder_output_shape_fails_its_step_not_the_engine(model, monkeypatch):
    eng = engine(model)
    prompt, mm = mm_prompt(seed=1)
    monkeypatch.setattr(model, "encode", lambda items: [torch.zeros(m.length + 1, 16) for m in items])
    [out] = run(eng, [(prompt, mm)])
    assert out.finish_reason == "error" and "expected (6, 16)" in out.error
    monkeypatch.undo()
    [ok] = run(eng, [(prompt, mm)])
    check(model, prompt, mm, ok)


def test_encoder_cache_shares_by_hash_and_frees_when_nobody_holds_it():
    cache = EncoderCacheManager(10)
    assert cache.acquire("a", b"x", 6) is True
    assert cache.acquire("b", b"x", 6) is False  # shared: no second encode
    assert cache.num_free == 4
    with pytest.raises(AnnaError, match="free rows"):
        cache.acquire("c", b"y", 5)
    cache.release("a", b"x")
    assert b"x" in cache and cache.take_freed() == []
    cache.release_all("b")
    assert b"x" not in cache and cache.take_freed() == [b"x"] and cache.num_free == 10


def test_media_hash_names_content_shape_and_dtype():
    t = torch.arange(6, dtype=torch.float32)
    assert media_hash(t) == media_hash(t.clone())
    assert media_hash(t) != media_hash(t.view(2, 3))
    assert media_hash(t) != media_hash(t.to(torch.float64))
    assert media_hash(b"abc", 3) != media_hash(b"abc", 4)
    with pytest.raises(TypeError):
        media_hash(object())


def _loaded(model):
    from anna_core.model import GenerationDefaults, LoadedModel

    return LoadedModel(model=model, tokenizer=None, generation=GenerationDefaults(), max_model_len=64, family="test",
                       dtype=torch.float32, device=torch.device("cpu"))


def test_llm_takes_media_and_runs_the_graph_path_by_default(model, monkeypatch):
    from anna_core.llm import LLM

    monkeypatch.setattr(model_runner, "prefill_buckets", lambda n: [b for b in (8, 16, 24) if b <= n])
    p1, mm1 = mm_prompt(seed=21, offset=2, length=6, tail=4)
    p2, mm2 = mm_prompt(seed=22, offset=0, length=4, tail=3)
    params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    cfg = {"block_size": BS, "num_blocks": 64, "max_num_seqs": 2, "prompt_cache_size": 0, "enable_prefix_caching": False}
    eager = LLM.from_loaded(_loaded(model), cuda_graph=False, **cfg)
    outs = eager.generate([p1, p2], params, multimodal=[mm1, mm2])
    assert [o.token_ids for o in outs] == [model.reference_greedy(p1, 6, mm1), model.reference_greedy(p2, 6, mm2)]
    assert eager.engine.runner.graphs is None and eager.engine.runner.prefill_graphs is None
    monkeypatch.setattr(model_runner, "accelerator", lambda device: FakeGraphAccelerator())
    fast = LLM.from_loaded(_loaded(model), **cfg)  # the defaults: the runner set up as anna serve does
    runner = fast.engine.runner
    assert runner.graphs is not None and runner.prefill_graphs is not None
    [one] = fast.generate(p1, params, multimodal=mm1)
    assert one.token_ids == outs[0].token_ids
    assert runner.num_prefill_graph_steps == 1 and runner.num_graph_steps >= 4
    with pytest.raises(InvalidRequestError, match="one MultiModalInputs is for one prompt"):
        fast.generate([p1, p2], params, multimodal=mm1)


def _prompt_of(media, sep=40):
    """A prompt of ``sep`` tokens each followed by one medium's placeholders (MediaItems re-placed)."""
    prompt, items = [], []
    for m in media:
        prompt.append(sep)
        items.append(MediaItem(m.modality, len(prompt), m.length, m.content_hash, m.data))
        prompt += [PLACEHOLDER] * m.length
    prompt.append(sep + 1)
    return prompt, grid_positions(len(prompt), items)


@pytest.mark.parametrize("budget,cache", [(4, 8), (4, 4), (3, 3)])
def test_a_prompt_that_repeats_media_does_not_stall_on_its_own_held_outputs(model, budget, cache):
    a, b, c = (image(s, 0, 3) for s in (31, 32, 33))
    prompt, mm = _prompt_of([a, b, c, a, b])
    eng = engine(model, max_encoder_tokens=budget, encoder_cache_tokens=cache, enable_prefix_caching=False)
    [out] = run(eng, [(prompt, mm)], n=4)
    check(model, prompt, mm, out, n=4)
    assert eng.scheduler.encoder_cache.num_used == 0 and not eng.runner.encoder.outputs


def test_positions_are_part_of_the_cache_keys(model):
    prompt = list(range(5, 18))
    shifted = MultiModalInputs((), [[i + 50 for i in range(len(prompt))]] * 3, 50)
    eng = engine(model, prompt_cache_size=4)
    plain = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)
    [a] = run(eng, [(prompt, None)], params=plain)
    [b] = run(eng, [(prompt, shifted)], params=plain)
    assert b.num_cached_tokens == 0  # the same ids at other positions: no block, no exact prompt shared
    assert a.token_ids == model.reference_greedy(prompt, 4) and b.token_ids == model.reference_greedy(prompt, 4, shifted)
    [again] = run(eng, [(prompt, shifted)], params=plain)
    assert again.num_cached_tokens == len(prompt) and again.token_ids == b.token_ids


def test_equal_hashes_of_different_lengths_are_different_media(model):
    short = image(41, 2, 4)
    long = MediaItem("image", 2, 6, short.content_hash, image(42, 2, 6).data)  # a processor setting changed the length
    p1 = [7, 8] + [PLACEHOLDER] * 4 + [9, 10, 11]
    p2 = [7, 8] + [PLACEHOLDER] * 6 + [9, 10, 11]
    mm1, mm2 = grid_positions(len(p1), [short]), grid_positions(len(p2), [long])
    outs = run(engine(model), [(p1, mm1), (p2, mm2), (list(range(20, 30)), None)])
    check(model, p1, mm1, outs[0])
    check(model, p2, mm2, outs[1])
    check(model, list(range(20, 30)), None, outs[2])


def test_an_aborted_request_frees_its_encoder_outputs_at_once(model):
    prompt, mm = mm_prompt(seed=43, offset=2, length=9, tail=4)
    eng = engine(model, prefill_chunk_size=4, enable_prefix_caching=False)
    eng.add_request("r", prompt, greedy(3), multimodal=mm)
    eng.step()  # the first chunk: the image is encoded and held
    assert eng.runner.encoder.outputs and eng.scheduler.encoder_cache.num_used == 9
    eng.abort_request("r")
    assert not eng.runner.encoder.outputs and eng.scheduler.encoder_cache.num_used == 0
    assert eng.next_wakeup() is None
