"""Sampler: greedy, filters, penalties with exact values, seeded noise independent of the batch."""

import math

import pytest
import torch
from anna_core.engine.request import Request
from anna_core.engine.sampler import Sampler, uniform_noise
from anna_core.engine.sampling_params import SamplingParams


def r(prompt=(1,), output=(), seed=0, eos=(), **params):
    req = Request("x", list(prompt), SamplingParams(**params), eos_token_ids=tuple(eos), seed=seed)
    req.output_token_ids = list(output)
    return req


def log_probs(*p):
    return torch.tensor([[math.log(x) for x in p]], dtype=torch.float32)


def test_greedy_is_argmax_and_top_k_1_equals_greedy():
    torch.manual_seed(0)
    logits = torch.randn(6, 50)
    sampler = Sampler()
    greedy = sampler(logits, [r(temperature=0.0) for _ in range(6)])
    assert torch.equal(greedy, logits.argmax(-1))
    top1 = sampler(logits, [r(temperature=1.3, top_k=1, seed=s) for s in range(6)])
    assert torch.equal(top1, greedy)


def test_mixed_greedy_and_sampled_rows():
    logits = torch.tensor([[0.0, 1.0, 0.5], [0.0, 1.0, 0.5]])
    out = Sampler()(logits, [r(temperature=0.0), r(temperature=1.0, top_k=1, seed=3)])
    assert out.tolist() == [1, 1]


def test_top_p_and_min_p_mask_the_right_tokens():
    probs = (0.5, 0.3, 0.15, 0.05)
    # top_p 0.75: 0.5 < 0.75 so the second token is needed; 0.8 >= 0.75 so the rest goes
    kept = Sampler._filter(log_probs(*probs), [SamplingParams(top_p=0.75)])
    assert torch.isfinite(kept[0]).tolist() == [True, True, False, False]
    # min_p 0.2: threshold 0.2 * 0.5 = 0.1 drops only 0.05
    kept = Sampler._filter(log_probs(*probs), [SamplingParams(min_p=0.2)])
    assert torch.isfinite(kept[0]).tolist() == [True, True, True, False]
    # top_k 3 then top_p 0.9 over the renormalised top 3 (0.526, 0.316, 0.158): keeps all 3
    kept = Sampler._filter(log_probs(*probs), [SamplingParams(top_k=3, top_p=0.9)])
    assert torch.isfinite(kept[0]).tolist() == [True, True, True, False]
    # unsorted vocabulary order is preserved
    kept = Sampler._filter(log_probs(0.05, 0.3, 0.15, 0.5), [SamplingParams(top_k=2)])
    assert torch.isfinite(kept[0]).tolist() == [False, True, False, True]
    assert kept[0, 3].item() == pytest.approx(math.log(0.5))


def test_filtered_tokens_are_never_sampled():
    logits = log_probs(0.4, 0.35, 0.2, 0.05).expand(400, 4)
    reqs = [r(top_p=0.7, seed=s) for s in range(400)]
    out = Sampler()(logits, reqs)
    assert set(out.tolist()) == {0, 1}


def test_penalties_change_the_right_logits_by_exact_amounts():
    logits = torch.tensor([[2.0, -1.0, 0.5, 3.0, -2.0]])
    req = r(prompt=[0], output=[2, 2, 4], repetition_penalty=2.0, presence_penalty=0.5,
            frequency_penalty=0.25)
    got = Sampler._penalize(logits.clone(), [req])
    # token 0: prompt only -> 2/2; token 1, 3: unseen; token 2: 0.5/2 - 0.25*2 - 0.5;
    # token 4: -2*2 - 0.25 - 0.5
    assert got[0].tolist() == pytest.approx([1.0, -1.0, 0.25 - 0.5 - 0.5, 3.0, -4.0 - 0.25 - 0.5])


def test_penalties_only_touch_their_own_row():
    logits = torch.zeros(2, 4) + 1.0
    a = r(output=[3], frequency_penalty=1.0)
    b = r(output=[], frequency_penalty=1.0)
    got = Sampler._penalize(logits.clone(), [a, b])
    assert got.tolist() == [[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]]


def test_min_tokens_masks_eos_and_stop_ids_until_reached():
    logits = torch.tensor([[5.0, 4.0, 3.0, 0.0]] * 3)
    reqs = [r(output=[], eos=[0], stop_token_ids=[1], min_tokens=2, temperature=0.0),
            r(output=[3, 3], eos=[0], stop_token_ids=[1], min_tokens=2, temperature=0.0),
            r(output=[], eos=[0], stop_token_ids=[1], min_tokens=2, ignore_eos=True, temperature=0.0)]
    assert Sampler()(logits, reqs).tolist() == [2, 0, 0]


def test_same_seed_same_tokens_alone_and_inside_a_batch():
    torch.manual_seed(1)
    logits = torch.randn(5, 64)
    params = dict(temperature=0.9, top_p=0.95)
    target = r(seed=1234, output=[1, 2, 3], **params)
    alone = Sampler()(logits[2:3], [target]).item()
    others = [r(seed=s, **params) for s in (1, 2, 3, 4)]
    batch = Sampler()(logits, others[:2] + [target] + others[2:])
    assert batch[2].item() == alone
    # a different step index (output length) draws fresh noise
    noise = uniform_noise(torch.tensor([1234, 1234]), torch.tensor([3, 4]), 64)
    assert not torch.equal(noise[0], noise[1])
    assert torch.equal(uniform_noise(torch.tensor([1234]), torch.tensor([3]), 64)[0], noise[0])


def test_seeds_span_the_int64_range_without_colliding():
    """Seeds are the int64 range (vLLM's): seeds equal modulo 2**63 (0 and -2**63, 5 and 5 - 2**63, -1 and
    2**63 - 1) draw different noise, the same seed the same; seeds outside the range are refused."""
    from anna_core.errors import InvalidRequestError

    pairs = [(0, -(1 << 63)), (5, 5 - (1 << 63)), (-1, (1 << 63) - 1)]
    for a, b in pairs:
        u = uniform_noise(torch.tensor([a, b, a]), torch.tensor([0, 0, 0]), 256)
        assert not torch.equal(u[0], u[1]) and torch.equal(u[0], u[2])
    for seed in (-(1 << 63), (1 << 63) - 1, -7):
        assert SamplingParams(seed=seed).seed == seed
    for seed in (1 << 63, -(1 << 63) - 1, 1 << 80):
        with pytest.raises(InvalidRequestError, match="64-bit signed integer") as e:
            SamplingParams(seed=seed)
        assert e.value.param == "seed"


def test_sampling_frequencies_follow_the_tempered_distribution():
    probs = torch.tensor([0.5, 0.3, 0.2])
    n = 3000
    logits = (probs.log() * 2.0).expand(n, 3)  # temperature 2 undoes the doubling
    out = Sampler()(logits, [r(seed=s, temperature=2.0) for s in range(n)])
    freq = torch.bincount(out, minlength=3).float() / n
    assert torch.allclose(freq, probs, atol=0.035), freq


def test_uniform_noise_is_in_the_open_unit_interval():
    u = uniform_noise(torch.tensor([0, 2**62 + 5]), torch.tensor([0, 10**6]), 1000)
    assert u.min().item() > 0.0 and u.max().item() < 1.0
    assert abs(u.mean().item() - 0.5) < 0.03


def test_the_plain_captured_sampler_draws_what_the_filtering_one_draws():
    """Rows that filter nothing (OpenAI's defaults): sample_plain_no_sync, which sorts nothing, gives the ids
    sample_no_sync gives with neutral filters, greedy rows included; unfiltered() tells such rows apart."""
    from anna_core.engine.sampler import sample_no_sync, sample_plain_no_sync, unfiltered

    torch.manual_seed(0)
    n, vocab = 6, 300
    logits = torch.randn(n, vocab) * 3
    temperature = torch.tensor([1.0, 0.7, 0.0, 1.3, 2.0, 1.0])
    seeds = torch.arange(n, dtype=torch.int64) * 7919
    steps = torch.tensor([0, 3, 5, 1, 9, 2], dtype=torch.int64)
    for shift in range(4):  # several draws
        plain = sample_plain_no_sync(logits, temperature, seeds, steps + shift)
        full = sample_no_sync(logits, temperature, torch.full((n,), vocab), torch.full((n,), 2.0), torch.zeros(n),
                              seeds, steps + shift)
        assert plain.tolist() == full.tolist()
        assert plain[2] == logits[2].argmax()
    assert len(set(sample_plain_no_sync(logits[:1].expand(64, -1), torch.ones(64), torch.arange(64), torch.zeros(64, dtype=torch.int64)).tolist())) > 5

    def req(**kw):
        return Request("r", [1], SamplingParams(**kw))

    assert unfiltered([req(temperature=1.0), req(temperature=0.0), req(top_k=vocab)], vocab)
    assert not unfiltered([req(temperature=1.0), req(top_k=5)], vocab)
    assert not unfiltered([req(top_p=0.9)], vocab) and not unfiltered([req(min_p=0.1)], vocab)


# (seed, step, id) whose hash has all top 24 bits set: (2**24 - 1 + 0.5) / 2**24 rounds to 1.0 in float32, where the
# Gumbel term -log(-log(u)) is +inf (found by scanning steps of seed 0 over a 3072-id vocabulary)
EDGE_SEED, EDGE_STEP, EDGE_ID, EDGE_VOCAB = 0, 3408, 2720, 3072


def test_uniform_noise_stays_below_one_where_float32_rounding_reaches_it():
    u = uniform_noise(torch.tensor([EDGE_SEED]), torch.tensor([EDGE_STEP]), EDGE_VOCAB)[0]
    assert u[EDGE_ID].item() == 1.0 - 2.0**-24 and u.max().item() < 1.0 and u.min().item() > 0.0


def _edge_logits() -> torch.Tensor:
    """``[1, 3072]``: a speech talker's layout (codes below 2048, control ids above at -inf but EOS 2150), with the
    edge id blocked."""
    torch.manual_seed(0)
    logits = torch.randn(1, EDGE_VOCAB) * 2
    logits[:, 2048:] = float("-inf")
    logits[:, 2150] = 0.5
    return logits


def test_a_masked_id_is_never_drawn_at_the_noise_edge_by_any_sampler():
    """Issue 27: with u == 1 at a masked (-inf) id, -inf + inf = NaN won argmax, and the talker sampled a control id
    (2269 on a GPU at 16 concurrent requests). Every sampler draws an unmasked id, the same one."""
    from anna_core.engine.sampler import sample_no_sync, sample_plain_no_sync, sample_topk_no_sync

    logits = _edge_logits()
    allowed = set(torch.isfinite(logits[0]).nonzero()[:, 0].tolist())
    temperature, seeds, steps = torch.tensor([0.9]), torch.tensor([EDGE_SEED]), torch.tensor([EDGE_STEP])
    top_k, top_p, min_p = torch.tensor([EDGE_VOCAB]), torch.tensor([1.0]), torch.tensor([0.0])
    full = sample_no_sync(logits, temperature, top_k, top_p, min_p, seeds, steps).item()
    plain = sample_plain_no_sync(logits, temperature, seeds, steps).item()
    req = r(seed=EDGE_SEED, output=[0] * EDGE_STEP, temperature=0.9)
    eager = Sampler()(logits.clone(), [req]).item()
    assert full in allowed and plain == full and eager == full, (full, plain, eager)
    # a finite logit masked by top-k: the fused head's candidates (top 64, the edge id among them) and the full path
    logits = torch.randn(1, EDGE_VOCAB)
    logits[0, EDGE_ID] = logits.max() + 1.0  # the edge id ranks first ...
    logits[0, :64] += 10.0  # ... behind 64 larger ones: outside top_k 50, inside the 65 candidates
    values, indices = logits.topk(65, dim=-1)
    assert EDGE_ID in indices[0].tolist()
    top50 = set(indices[0, :50].tolist())
    k50 = torch.tensor([50])
    full = sample_no_sync(logits, temperature, k50, top_p, min_p, seeds, steps).item()
    cand, _ = sample_topk_no_sync(values, indices, temperature, k50, top_p, min_p, seeds, steps)
    eager = Sampler()(logits.clone(), [r(seed=EDGE_SEED, output=[0] * EDGE_STEP, temperature=0.9, top_k=50)]).item()
    assert full in top50 and cand.item() == full and eager == full, (full, cand.item(), eager)
