"""LLMEngine and LLM over a fake model whose tokens depend on the paged KV cache and state slots."""

import pytest
from anna_core.engine.config import EngineConfig
from anna_core.engine.llm_engine import LLMEngine
from anna_core.engine.sampling_params import SamplingParams
from anna_core.errors import InvalidRequestError
from anna_core.llm import LLM
from anna_core.testing.engine_run import run_to_completion

from ._engine_fakes import FakeLM, build_tokenizer, greedy_reference, loaded

V = 101
PROMPTS = [[1, 2, 3], [5] * 21, [7, 8], [(i * 13) % V for i in range(45)], [3] * 5, [60], [9, 9, 1] * 9, [4] * 17]


def run(engine, prompts, params):
    streamed = {}
    final = run_to_completion(engine, prompts, params,
                              on_output=lambda out: streamed.setdefault(out.request_id, []).extend(out.delta_token_ids))
    for out in final:
        assert streamed[out.request_id] == out.token_ids  # deltas add up to the cumulative ids
    return final


def engine(**cfg):
    cfg = {"block_size": 4, "num_blocks": 256, "max_num_seqs": 8, "max_prefill_tokens": 64, **cfg}
    return LLMEngine(FakeLM(V), config=EngineConfig(**cfg))


def test_batched_greedy_equals_each_request_alone_and_the_reference():
    greedy = SamplingParams(temperature=0.0, max_tokens=12)
    batched = run(engine(prefill_chunk_size=8), PROMPTS, greedy)
    for p, out in zip(PROMPTS, batched):
        assert out.finish_reason == "length", out.error
        assert out.token_ids == greedy_reference(p, 12, V)
        alone = run(engine(max_num_seqs=1), [p], greedy)[0]
        assert alone.token_ids == out.token_ids
        assert out.usage.prompt_tokens == len(p) and out.usage.completion_tokens == 12


def test_preemption_with_a_tiny_cache_still_gives_full_correct_outputs():
    eng = engine(num_blocks=24, max_prefill_tokens=32)  # 96 token slots for 8 requests
    params = SamplingParams(temperature=0.0, max_tokens=20)
    outs = run(eng, PROMPTS, params)
    assert eng.scheduler.num_preemptions > 0
    for p, out in zip(PROMPTS, outs):
        assert out.token_ids == greedy_reference(p, 20, V)
    assert eng.kv.num_used_blocks == 0 and eng.kv.slots.num_used_slots == 0


def test_seeded_sampling_is_the_same_alone_in_a_batch_and_after_preemption():
    params = [SamplingParams(temperature=1.0, top_p=0.9, seed=100 + i, max_tokens=15) for i in range(len(PROMPTS))]
    batched = run(engine(), PROMPTS, params)
    squeezed = run(engine(num_blocks=24, max_prefill_tokens=16), PROMPTS, params)
    for i, p in enumerate(PROMPTS):
        alone = run(engine(), [p], [params[i]])[0]
        assert batched[i].token_ids == alone.token_ids == squeezed[i].token_ids
    assert any(o.token_ids != greedy_reference(p, 15, V) for o, p in zip(batched, PROMPTS))  # really sampled


def test_abort_frees_blocks_and_slots_at_once():
    eng = engine()
    eng.add_request("a", [1] * 30, SamplingParams(temperature=0.0, max_tokens=50))
    eng.add_request("b", [2] * 3, SamplingParams(temperature=0.0, max_tokens=50))
    eng.step()
    eng.step()
    assert eng.kv.num_used_blocks > 0 and eng.kv.slots.num_used_slots == 2
    out = eng.abort_request("a")
    assert out.finished and out.finish_reason == "abort" and len(out.token_ids) >= 1
    assert eng.kv.slots.num_used_slots == 1 and eng.kv.num_used_blocks == 1  # b: 4 tokens computed, one block
    assert eng.abort_request("a") is None
    eng.abort_request("b")
    assert not eng.has_unfinished() and eng.kv.num_used_blocks == 0 and eng.kv.slots.num_used_slots == 0


def test_eos_and_stop_token_ids_end_requests_unless_ignored():
    prompt = [1, 2, 3]
    ref = greedy_reference(prompt, 10, V)
    eng = LLMEngine(FakeLM(V), config=EngineConfig(block_size=4, num_blocks=64), eos_token_ids=[ref[3]])
    [out] = run(eng, [prompt], SamplingParams(temperature=0.0, max_tokens=10))
    assert out.finish_reason == "stop" and out.stop_reason is None and out.token_ids == ref[:4]
    [out] = run(eng, [prompt], SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True))
    assert out.finish_reason == "length" and out.token_ids == ref
    [out] = run(eng, [prompt], SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True,
                                              stop_token_ids=[ref[5]]))
    assert out.finish_reason == "stop" and out.stop_reason == ref[5] and out.token_ids == ref[:6]


def test_model_failure_fails_its_requests_with_error_and_frees_them():
    model = FakeLM(V)
    eng = LLMEngine(model, config=EngineConfig(block_size=4, num_blocks=64))
    model.fail_on_token = 99
    outs = run(eng, [[1, 2], [99, 1]], SamplingParams(temperature=0.0, max_tokens=3))
    assert all(o.finish_reason == "error" and "injected failure" in o.error for o in outs)
    assert eng.kv.num_used_blocks == 0 and eng.kv.slots.num_used_slots == 0
    model.fail_on_token = None
    [out] = run(eng, [[1, 2]], SamplingParams(temperature=0.0, max_tokens=3))
    assert out.token_ids == greedy_reference([1, 2], 3, V)


def test_requests_are_validated():
    eng = engine(num_blocks=8)  # 32 tokens of cache -> max_model_len 32
    assert eng.max_model_len == 32
    with pytest.raises(InvalidRequestError, match="at most 32"):
        eng.add_request("x", [1] * 32)
    with pytest.raises(InvalidRequestError, match="empty"):
        eng.add_request("x", [])
    with pytest.raises(InvalidRequestError, match="outside the vocabulary"):
        eng.add_request("x", [V])
    with pytest.raises(InvalidRequestError, match="tokenizer"):
        eng.add_request("x", [1], SamplingParams(stop=["a"]))
    eng.add_request("x", [1] * 28, SamplingParams(temperature=0.0, max_tokens=None))
    with pytest.raises(InvalidRequestError, match="already in use"):
        eng.add_request("x", [1])
    out = None
    while eng.has_unfinished():
        for o in eng.step():
            out = o
    assert out.finish_reason == "length" and len(out.token_ids) == 4  # stopped at max_model_len


# -- LLM with a tokenizer: text, stop strings, chat, generation defaults --------------------------

@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def scripted_llm(tok, text, **cfg):
    script = tok.encode(text)
    model = FakeLM(tok.vocab_size, script=script)
    cfg = {"block_size": 4, "num_blocks": 128, **cfg}
    return LLM.from_loaded(loaded(model, tok, eos=[tok.eos_token_id]), **cfg), script


def test_llm_generate_text_and_stop_strings_across_tokens(tok):
    text = "Hello world! 世界 Stop here please. The end."
    llm, script = scripted_llm(tok, text)
    prompt = tok.decode(script[:2])
    greedy = SamplingParams(temperature=0.0, max_tokens=len(script))
    [full] = llm.generate(prompt, greedy)
    assert full.text.startswith(text[len(prompt):])
    cut = SamplingParams(temperature=0.0, max_tokens=40, stop=["op he"])  # spans the 'St|op| here' tokens
    [out] = llm.generate(prompt, cut)
    assert out.finish_reason == "stop" and out.stop_reason == "op he"
    assert prompt + out.text == "Hello world! 世界 St"
    inc = SamplingParams(temperature=0.0, max_tokens=40, stop=["op he"], include_stop_str_in_output=True)
    [out] = llm.generate(prompt, inc)
    assert prompt + out.text == "Hello world! 世界 Stop he"


def test_streamed_deltas_never_leak_a_stop_string(tok):
    text = "Hello world! Stop here please."
    _, script = scripted_llm(tok, text)
    eng = LLMEngine(FakeLM(tok.vocab_size, script=script), tokenizer=tok,
                    config=EngineConfig(block_size=4, num_blocks=64))
    eng.add_request("s", script[:1], SamplingParams(temperature=0.0, max_tokens=30, stop=["here"]))
    deltas = []
    while eng.has_unfinished():
        deltas += [o.delta_text for o in eng.step()]
    assert "".join(deltas) == tok.decode(script[1:]).split("here")[0]
    assert all("h" not in d for d in deltas[-3:])


def test_llm_mixed_prompts_eos_and_generation_defaults(tok):
    text = "Hello world!"
    script = tok.encode(text) + [tok.eos_token_id]
    model = FakeLM(tok.vocab_size, script=script)
    llm = LLM.from_loaded(loaded(model, tok, eos=[tok.eos_token_id], sampling={"do_sample": False, "top_k": 20}),
                          block_size=4, num_blocks=64)
    assert llm.get_default_sampling_params().temperature == 0.0
    assert llm.get_default_sampling_params().top_k == 20
    outs = llm.generate([tok.decode(script[:1]), script[:2]], SamplingParams(temperature=0.0, max_tokens=30))
    assert [o.text for o in outs] == [tok.decode(script[1:-1]), tok.decode(script[2:-1])]
    assert all(o.finish_reason == "stop" and o.token_ids[-1] == tok.eos_token_id for o in outs)
    [default] = llm.generate(script[:1])  # None -> checkpoint defaults (greedy here)
    assert default.text == outs[0].text and default.finish_reason == "stop"


def test_llm_chat_applies_the_template(tok):
    llm, _ = scripted_llm(tok, "Hello world!")
    rendered = tok.apply_chat_template([{"role": "user", "content": "hi"}])
    [out] = llm.chat([{"role": "user", "content": "hi"}], SamplingParams(temperature=0.0, max_tokens=2))
    assert out.prompt_token_ids == tok.encode(rendered)
    assert rendered.endswith("<|im_start|>assistant\n")


def test_llm_closed_refuses_to_generate(tok):
    from anna_core.errors import AnnaError

    llm, script = scripted_llm(tok, "Hello world!")
    llm.close()
    with pytest.raises(AnnaError, match="this LLM is closed"):
        llm.generate(script[:2], SamplingParams(temperature=0.0, max_tokens=4))
    with pytest.raises(AnnaError, match="this LLM is closed"):
        llm.chat([{"role": "user", "content": "hi"}])
