"""End to end: ``anna_core.LLM`` over a tiny Qwen3.5 checkpoint gives HF ``generate``'s greedy tokens,
batched, with chunked prefill, and after preemption."""

from __future__ import annotations

import pytest
from anna_core import LLM, SamplingParams
from anna_core.testing.oracle import hf_greedy, hf_model

N = 12
GREEDY = SamplingParams(temperature=0.0, max_tokens=N, ignore_eos=True)


@pytest.fixture(scope="module")
def prompts(long_prompt):
    return [[5, 6, 7], long_prompt[:90], [100] * 5, long_prompt[7:40], [42]]


@pytest.fixture(scope="module")
def hf_tokens(anna_tiny_qwen35, prompts):
    hf = hf_model(anna_tiny_qwen35)
    return [hf_greedy(anna_tiny_qwen35, p, N, model=hf) for p in prompts]


def test_batched_greedy_matches_hf_generate(anna_tiny_qwen35, prompts, hf_tokens):
    # a 32-token budget with 16-token chunks: the 90-token prompt is prefilled over 6 steps while
    # the others decode next to it
    llm = LLM(anna_tiny_qwen35, device="cpu", dtype="fp32", block_size=16, num_blocks=64, max_num_seqs=8,
              max_prefill_tokens=32, prefill_chunk_size=16)
    outs = llm.generate(prompts, GREEDY)
    for out, ref in zip(outs, hf_tokens):
        assert out.finish_reason == "length", out.error
        assert out.token_ids == ref
    assert llm.engine.eos_token_ids == (2, 0)  # from generation_config.json
    assert llm.engine.kv.num_used_blocks == 0 and llm.engine.kv.slots.num_used_slots == 0


def test_preempted_requests_still_match_hf(anna_tiny_qwen35, prompts, hf_tokens):
    llm = LLM(anna_tiny_qwen35, device="cpu", dtype="fp32", block_size=4, num_blocks=40, max_num_seqs=8,
              max_prefill_tokens=128)
    outs = llm.generate(prompts, GREEDY)
    assert llm.engine.scheduler.num_preemptions > 0
    assert [o.token_ids for o in outs] == hf_tokens


def test_text_prompt_and_chat(anna_tiny_qwen35):
    llm = LLM(anna_tiny_qwen35, device="cpu", dtype="fp32", num_blocks=32)
    tok = llm.tokenizer
    [out] = llm.generate("Hello, world!", SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True))
    assert out.prompt_token_ids == tok.encode("Hello, world!", add_special_tokens=True)
    assert out.text == tok.decode(out.token_ids) and len(out.token_ids) == 6
    msgs = [{"role": "user", "content": "Hi there"}]
    [reply] = llm.chat(msgs, SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True),
                       chat_template_kwargs={"enable_thinking": False})
    assert reply.prompt_token_ids == tok.encode(tok.apply_chat_template(msgs, enable_thinking=False))
    assert tok.decode(reply.prompt_token_ids).endswith("<think>\n\n</think>\n\n")
