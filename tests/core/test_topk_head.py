"""Sampling from the fused top-k head's candidates (:mod:`anna_core.engine.topk_head`) equals sampling from the
full logits: the same noise per id, greedy ties to the lowest id, top-k / top-p / min-p within the candidates,
logprobs through the logsumexp; and which requests may take the head."""

from __future__ import annotations

import pytest
import torch
from anna_core.engine import logprobs as lp
from anna_core.engine.cuda_graphs import MODES, TOPK_MODES, DecodeGraphs
from anna_core.engine.model_runner import RunnerConfig
from anna_core.engine.request import Request
from anna_core.engine.sampler import Sampler, sample_no_sync, sample_topk_no_sync, uniform_noise, uniform_noise_at
from anna_core.engine.sampling_params import SamplingParams, StructuredOutput
from anna_core.engine.topk_head import FUSED_K, fits_topk_head, sample_candidates
from anna_core.errors import AnnaError
from anna_core.kernels.reference.lm_head_topk import lm_head_topk

V = 500


def _logits(n, seed):
    """``[n, V]`` float32 logits rounded to bfloat16 (many equal values, as a bfloat16 head gives)."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, V, generator=g) * 3).to(torch.bfloat16).float()


def _candidates(logits):
    values, order = logits.sort(dim=-1, descending=True, stable=True)
    return values[:, :FUSED_K], order[:, :FUSED_K], torch.logsumexp(logits, -1)


def test_noise_at_ids_is_the_full_noise_there():
    seeds, steps = torch.tensor([0, 7, 2**40 + 3]), torch.tensor([0, 5, 1000])
    ids = torch.randint(0, V, (3, 64), generator=torch.Generator().manual_seed(1))
    assert torch.equal(uniform_noise_at(seeds, steps, ids), uniform_noise(seeds, steps, V).gather(1, ids))


def test_candidate_sampling_draws_the_full_samplers_ids():
    n = 256
    logits = _logits(n, 0)
    g = torch.Generator().manual_seed(2)
    temperature = torch.where(torch.rand(n, generator=g) < 0.2, 0.0, torch.rand(n, generator=g) * 1.5 + 0.1)
    top_k = torch.randint(1, FUSED_K + 1, (n,), generator=g)
    top_p = torch.where(torch.rand(n, generator=g) < 0.5, 2.0, torch.rand(n, generator=g) * 0.9 + 0.05)
    min_p = torch.where(torch.rand(n, generator=g) < 0.5, 0.0, torch.rand(n, generator=g) * 0.3)
    seeds, steps = torch.randint(0, 2**40, (n,), generator=g), torch.randint(0, 100, (n,), generator=g)
    want = sample_no_sync(logits, temperature, top_k, top_p, min_p, seeds, steps)
    values, indices, _ = _candidates(logits)
    got, picks = sample_topk_no_sync(values, indices, temperature, top_k, top_p, min_p, seeds, steps)
    assert torch.equal(got, want) and torch.equal(indices.gather(1, picks[:, None])[:, 0], got)
    assert len(set(got.tolist())) > n // 2  # the rows did sample different ids


def test_greedy_ties_take_the_lowest_id():
    logits = torch.zeros(1, V)
    logits[0, [400, 17, 250]] = 5.0
    values, indices, _ = lm_head_topk(torch.ones(1, V), torch.diag(logits[0]), None, None, "none", 4, None)
    assert indices[0, :3].tolist() == [17, 250, 400] and values[0, :3].tolist() == [5.0] * 3
    zero = torch.zeros(1)
    ids, _ = sample_topk_no_sync(values, indices, zero, torch.ones(1, dtype=torch.int64), zero, zero,
                                 torch.zeros(1, dtype=torch.int64), torch.zeros(1, dtype=torch.int64))
    assert ids.tolist() == [17] == logits.argmax(-1).tolist()


def _req(i, **params):
    r = Request(f"r{i}", [1, 2, 3], SamplingParams(max_tokens=8, **params), eos_token_ids=(0,), seed=100 + i)
    r.output_token_ids = [4] * i
    return r


def test_eager_candidate_sampling_and_logprobs_equal_the_full_paths():
    logits = _logits(4, 3)
    requests = [_req(0, temperature=0.0, logprobs=3), _req(1, temperature=0.8, top_k=50, top_p=0.9),
                _req(2, temperature=1.2, top_k=7, logprobs=0), _req(3, temperature=1.0, top_k=64, min_p=0.05)]
    want = Sampler()(logits, requests)
    got = sample_candidates(*_candidates(logits), requests, V)
    assert got == want.tolist()
    assert [len(r.logprobs) for r in requests] == [1, 0, 1, 0]
    raw = lp.raw_logprobs(logits)
    for i, r in ((0, requests[0]), (2, requests[2])):
        entry = r.logprobs[0]
        assert entry.token_id == got[i] and abs(entry.logprob - raw[i, got[i]].item()) <= 1e-5
        # the full path's torch.topk lists equal logprobs in no fixed order; the fused head the lower id first
        values, order = raw[i].sort(descending=True, stable=True)
        k = r.params.logprobs
        assert [t for t, _ in entry.top] == order[:k].tolist()
        assert all(abs(p - q) <= 1e-5 for (_, p), q in zip(entry.top, values[:k].tolist()))


@pytest.mark.parametrize(("params", "fits"), [
    ({"temperature": 0.0}, True),
    ({"temperature": 0.0, "logprobs": 20}, True),
    ({"temperature": 0.7, "top_k": 64, "top_p": 0.5, "min_p": 0.1}, True),
    ({"temperature": 0.7, "top_k": 65}, False),
    ({"temperature": 0.7}, False),  # top_k off: any token may be drawn
    ({"temperature": 0.0, "repetition_penalty": 1.1}, False),
    ({"temperature": 0.0, "presence_penalty": 0.1}, False),
    ({"temperature": 0.0, "frequency_penalty": 0.1}, False),
    ({"temperature": 0.0, "logit_bias": {3: 1.0}}, False),
    ({"temperature": 0.0, "structured": StructuredOutput("json_object")}, False),
    ({"temperature": 0.0, "min_tokens": 5, "stop_token_ids": [9]}, False),
])
def test_which_requests_fit_the_topk_head(params, fits):
    assert fits_topk_head([_req(0, temperature=0.0), _req(1, **params)]) is fits


def test_min_tokens_no_longer_banning_fits():
    assert fits_topk_head([_req(5, temperature=0.0, min_tokens=3, stop_token_ids=[9])])


def test_bad_settings_raise():
    with pytest.raises(AnnaError, match="fused_topk_head"):
        RunnerConfig(fused_topk_head="yes")
    with pytest.raises(AnnaError, match="topk"):
        DecodeGraphs(None, None, None, max_batch=1, max_blocks_per_seq=1, vocab_size=V, modes=MODES + TOPK_MODES)


def test_full_and_fused_packs_agree_on_tied_top_logprobs():
    """The full head's ``pack`` lists equal logprobs lower id first, as ``pack_candidates`` does: a row's
    ``top_logprobs`` never depends on which head its step took (bfloat16 logits tie often)."""
    logits = torch.zeros(2, V)
    logits[:, [400, 17, 250, 3]] = torch.tensor([2.0, 2.0, 2.0, 1.0])  # a three-way tie at the top, ids scattered
    logits[1, 99] = 2.0  # four-way: the k-th place goes to the lowest tied ids
    ids, rows, k = torch.tensor([17, 17]), torch.tensor([0, 1]), 3
    full = lp.pack(ids, lp.raw_logprobs(logits), rows, k)
    values, indices, lse = _candidates(logits)
    fused = lp.pack_candidates(ids, torch.zeros(2, dtype=torch.long), values, indices, lse, rows, k)
    _, entries = lp.unpack(full.tolist(), 2, [0, 1], [k, k], k)
    assert [[t for t, _ in e.top] for e in entries] == [[17, 250, 400], [17, 99, 250]]
    assert torch.allclose(full[2:], fused[2:]) and full[:2].tolist() == fused[:2].tolist()
