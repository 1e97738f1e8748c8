"""The fused top-k LM head on a tiny Qwen3.5 (CPU: the ``lm_head_topk`` reference): the engine with it gives the
full-logit path's tokens over 32 tokens (greedy, single and batched; a quantized head; seeded top-k / top-p /
min-p sampling, which draws the same noise), its logprobs within 1e-5, and a step with a request that needs the
full logits (penalties, logit bias, a grammar, min_tokens) takes the full head for the whole step. Decode graphs
(on the fake graph-capable accelerator) capture the top-k modes and replay them."""

from __future__ import annotations

import pytest
import torch
from anna_core import SamplingParams
from anna_core.engine.config import EngineConfig
from anna_core.engine.llm_engine import LLMEngine
from anna_core.engine.model_runner import RunnerConfig
from anna_core.engine.sampling_params import StructuredOutput
from anna_core.testing.engine_run import run_to_completion

from tests.qwen35.conftest import load_anna

N = 32
GREEDY = SamplingParams(temperature=0.0, max_tokens=N, ignore_eos=True)
PROMPTS = [[5, 6, 7], [100] * 5, [42], list(range(3, 40))]


@pytest.fixture(scope="module")
def loaded(anna_tiny_qwen35):
    return load_anna(anna_tiny_qwen35)


def _engine(loaded, mode, *, max_num_seqs=8, accel=None, graphs=False):
    eng = LLMEngine.from_loaded(loaded, EngineConfig(block_size=16, num_blocks=64, max_num_seqs=max_num_seqs,
                                                     max_prefill_tokens=128, max_model_len=128))
    if accel is not None:
        eng.runner.accel = accel
    eng.runner.setup(RunnerConfig(cuda_graph=graphs, warmup=False, fused_topk_head=mode), max_model_len=128,
                     max_num_seqs=max_num_seqs)
    return eng


def _drive(eng, prompts, params):
    """The finished outputs, each with ``logprobs`` set to every step's entries (outputs carry their delta's)."""
    logprobs = {}
    outs = run_to_completion(eng, prompts, params,
                             on_output=lambda o: logprobs.setdefault(o.request_id, []).extend(o.logprobs or []))
    assert all(o.finish_reason == "length" for o in outs), [o.error for o in outs]
    for o in outs:
        o.logprobs = logprobs.get(o.request_id, [])
    return outs


def _run(loaded, mode, prompts, params, **kw):
    eng = _engine(loaded, mode, **kw)
    return _drive(eng, prompts, params), eng.runner.head_report()


@pytest.mark.parametrize("prompts", [PROMPTS, PROMPTS[:1]], ids=["batched", "single"])
def test_greedy_tokens_equal_the_full_heads(loaded, prompts):
    fused, report = _run(loaded, "on", prompts, GREEDY)
    full, full_report = _run(loaded, "off", prompts, GREEDY)
    assert [o.token_ids for o in fused] == [o.token_ids for o in full]
    # every decode step took the top-k head; the prompts' step kept their logits (the prompt cache): full head
    assert report["active"] and report["topk_steps"] == N - 1 and report["full_steps"] == 1
    assert not full_report["active"] and full_report["topk_steps"] == 0


def test_auto_keeps_the_full_head_on_the_cpu(loaded):
    _, report = _run(loaded, "auto", PROMPTS[:1], SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True))
    assert report["model_supports"] and not report["active"] and report["topk_steps"] == 0


def test_a_vocabulary_below_the_candidate_count_keeps_the_full_head(tmp_path):
    """A vocabulary of 48 (< the head's 64 candidates): "on" leaves the fused head inactive, and generation works."""
    from anna_core.testing.checkpoints import build_tiny_qwen35

    small = load_anna(build_tiny_qwen35(tmp_path / "v48", vocab_size=48))
    params = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)
    outs, report = _run(small, "on", [[5, 6, 7]], params)
    assert not report["active"] and report["topk_steps"] == 0 and len(outs[0].token_ids) == 4


def test_quantized_head_greedy_tokens_equal_the_full_heads(anna_tiny_qwen35):
    from anna_core.loading import load_model

    loaded = load_model(anna_tiny_qwen35, device="cpu", dtype="fp32", family_options={"lm_head_quant": "int8"})
    fused, report = _run(loaded, "on", PROMPTS, GREEDY)
    full, _ = _run(loaded, "off", PROMPTS, GREEDY)
    assert [o.token_ids for o in fused] == [o.token_ids for o in full]
    assert report["topk_steps"] == N - 1


def test_seeded_sampling_draws_the_full_paths_tokens(loaded):
    params = [SamplingParams(temperature=0.9, top_k=20, top_p=0.8, seed=7, max_tokens=N, ignore_eos=True),
              SamplingParams(temperature=1.3, top_k=64, seed=11, max_tokens=N, ignore_eos=True),
              SamplingParams(temperature=1.0, top_k=40, min_p=0.1, seed=3, max_tokens=N, ignore_eos=True),
              SamplingParams(temperature=0.0, max_tokens=N, ignore_eos=True)]
    fused, report = _run(loaded, "on", PROMPTS, params)
    full, _ = _run(loaded, "off", PROMPTS, params)
    assert [o.token_ids for o in fused] == [o.token_ids for o in full]
    assert report["topk_steps"] == N - 1
    assert len({tuple(o.token_ids) for o in fused}) == 4  # the rows did sample (distinct sequences)


def test_logprobs_equal_the_full_heads(loaded):
    params = SamplingParams(temperature=1.0, top_k=30, seed=5, max_tokens=8, ignore_eos=True, logprobs=5)
    fused, report = _run(loaded, "on", PROMPTS[:2], params)
    full, _ = _run(loaded, "off", PROMPTS[:2], params)
    assert report["topk_steps"] == 8 and report["full_steps"] == 0  # logprob rows keep no prompt logits
    for a, b in zip(fused, full):
        assert a.token_ids == b.token_ids and len(a.logprobs) == len(b.logprobs) == 8
        for x, y in zip(a.logprobs, b.logprobs):
            assert x.token_id == y.token_id and abs(x.logprob - y.logprob) <= 1e-5
            assert [t for t, _ in x.top] == [t for t, _ in y.top]
            assert max(abs(p - q) for (_, p), (_, q) in zip(x.top, y.top)) <= 1e-5


@pytest.mark.parametrize("odd", [
    SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True, repetition_penalty=1.3),
    SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True, presence_penalty=0.5),
    SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True, logit_bias={7: 5.0}),
    SamplingParams(temperature=0.0, max_tokens=4, min_tokens=4, stop_token_ids=[3]),
    SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True,
                   structured=StructuredOutput("grammar", 'root ::= [a-z]+')),
    SamplingParams(temperature=1.0, top_k=65, seed=1, max_tokens=4, ignore_eos=True),
    SamplingParams(temperature=1.0, seed=1, max_tokens=4, ignore_eos=True),  # top_k off: the whole vocabulary
], ids=["repetition", "presence", "logit_bias", "min_tokens", "grammar", "top_k_65", "no_top_k"])
def test_a_request_needing_the_full_logits_takes_the_full_head_for_the_step(loaded, odd):
    plain = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)
    fused, report = _run(loaded, "on", PROMPTS[:2], [plain, odd])
    full, _ = _run(loaded, "off", PROMPTS[:2], [plain, odd])
    assert report["topk_steps"] == 0 and report["full_steps"] == 4
    assert [o.token_ids for o in fused] == [o.token_ids for o in full]


def test_decode_graphs_replay_the_topk_modes(loaded):
    from anna_core.testing.fake_graphs import FakeGraphAccelerator

    params = [GREEDY, SamplingParams(temperature=0.9, top_k=20, seed=7, max_tokens=N, ignore_eos=True),
              SamplingParams(temperature=0.7, top_k=10, seed=2, max_tokens=N, ignore_eos=True, logprobs=2)]
    eng = _engine(loaded, "on", max_num_seqs=4, accel=FakeGraphAccelerator(), graphs=True)
    assert {"topk_greedy", "topk_sample", "topk"} <= set(eng.runner.graphs.modes)
    graph_steps = eng.runner.num_graph_steps
    outs = _drive(eng, PROMPTS[:3], params)
    want, _ = _run(loaded, "off", PROMPTS[:3], params)
    assert [o.token_ids for o in outs] == [o.token_ids for o in want]
    assert eng.runner.num_graph_steps - graph_steps == N - 1  # every decode step replayed a graph
    assert eng.runner.head_report()["topk_steps"] == N - 1
    assert len(outs[2].logprobs) == len(want[2].logprobs) == N
    for x, y in zip(outs[2].logprobs, want[2].logprobs):
        assert x.token_id == y.token_id and abs(x.logprob - y.logprob) <= 1e-5


def test_topk_head_candidates_are_compute_logits_top_k(loaded):
    model = loaded.model
    hidden = torch.randn(3, model.config.hidden_size, generator=torch.Generator().manual_seed(0))
    values, indices, lse = model.compute_topk(hidden, 64)
    logits = model.compute_logits(hidden)
    assert torch.equal(values, logits.gather(1, indices)) and torch.equal(indices[:, 0], logits.argmax(-1))
    assert torch.allclose(lse, torch.logsumexp(logits, -1), atol=1e-5)
    assert bool((values[:, -1:] >= logits.scatter(1, indices, float("-inf"))).all())
