"""``top_k_gumbel_sample`` in Triton (one launch: temperature, top-k filter, Gumbel-max argmax) against its torch
reference under the interpreter: the same ids for Qwen3-TTS's code predictor shape (2,048 codes, top-k 50) and
across filter widths, strided rows, ties at the ``k``-th score; the reference past the kernel's limits; clear
errors."""

import pytest
import torch
from anna_core.kernels.reference.sampling import top_k_gumbel_sample as reference

from tests.xpu_kernels._interp import require_triton_interpreter

require_triton_interpreter()

from anna_xpu_kernels import gumbel_sample  # noqa: E402
from anna_xpu_kernels.gumbel_sample import top_k_gumbel_sample  # noqa: E402

from tests.xpu_kernels._launches import LaunchCounter  # noqa: E402


def _noise(rows: int, vocab: int, gen: torch.Generator) -> torch.Tensor:
    u = torch.rand(rows, vocab, generator=gen).clamp_(min=torch.finfo(torch.float32).tiny, max=1.0 - 1e-7)
    return torch.log(-torch.log(u))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("top_k", [50, 1, 2, 64, 0])
def test_code_predictor_rows_equal_the_reference_in_one_launch(dtype, top_k):
    gen = torch.Generator().manual_seed(top_k)
    buffer = (torch.randn(6, 2, 2048, generator=gen) * 3).to(dtype)
    logits = buffer[:, 1]  # [6, 2048], row stride 4096: the first pass's last position of each row
    noise = _noise(6, 2048, gen)
    with LaunchCounter() as c:
        got = top_k_gumbel_sample(logits, noise, 0.9, top_k)
    assert {k: v for k, v in c.launches.items() if k.startswith("triton:")} == {"triton:_top_k_gumbel_kernel": 1}
    want = reference(logits, noise, 0.9, top_k)
    assert got.dtype == torch.int64 and torch.equal(got, want)
    if 0 < top_k:  # every draw lies in the row's top k
        kth = torch.topk(logits.float() / 0.9, top_k, dim=-1).values[:, -1]
        assert bool(((logits.float() / 0.9).gather(1, got[:, None])[:, 0] >= kth).all())


def test_the_filter_matters_and_ties_at_the_kth_score_are_kept():
    logits = torch.zeros(3, 100)
    logits[:, 10:15] = 2.0  # five equal top scores
    logits[:, 20] = 1.0
    noise = torch.zeros(3, 100)
    noise[0, 20] = -5.0  # id 20 (sixth largest) wins without the filter
    noise[1, 14] = -5.0  # the last of the five ties wins with top_k = 3 (ties with the 3rd are kept)
    assert top_k_gumbel_sample(logits, noise, 1.0, 0).tolist() == [20, 14, 10]
    assert top_k_gumbel_sample(logits, noise, 1.0, 3).tolist() == [10, 14, 10]
    assert top_k_gumbel_sample(logits, noise, 1.0, 6).tolist() == [20, 14, 10]
    for k in (0, 3, 6):
        assert torch.equal(top_k_gumbel_sample(logits, noise, 1.0, k), reference(logits, noise, 1.0, k))


def test_scores_are_tempered_by_the_float32_reciprocal_on_every_device():
    """``logits * float32(1 / float32(t))``, not the IEEE quotient: rows of two adjacent float32 logits, where the
    two temperings tie or order them differently for some rows, pick the same ids in the kernel and the reference,
    and those are the product's (the quotient's differ on some of these rows)."""
    from anna_core.kernels.reference.sampling import temperature_reciprocal

    t = 0.7
    a = torch.rand(512, generator=torch.Generator().manual_seed(9)) * 8 + 0.5
    logits = torch.stack([a, torch.nextafter(a, torch.tensor(float("inf")))], dim=1)  # [512, 2]
    noise = torch.zeros_like(logits)
    got = top_k_gumbel_sample(logits, noise, t, 0)
    product = (logits * temperature_reciprocal(t)).argmax(dim=-1)
    assert torch.equal(got, reference(logits, noise, t, 0)) and torch.equal(got, product)
    assert not torch.equal(product, (logits / t).argmax(dim=-1))


def test_past_the_kernel_limits_the_reference_runs(monkeypatch):
    monkeypatch.setattr(gumbel_sample, "MAX_VOCAB", 64)
    gen = torch.Generator().manual_seed(3)
    logits, noise = torch.randn(2, 65, generator=gen), _noise(2, 65, gen)
    with LaunchCounter() as c:
        got = top_k_gumbel_sample(logits, noise, 0.7, 10)
    assert not any(k.startswith("triton:") for k in c.launches)
    assert torch.equal(got, reference(logits, noise, 0.7, 10))
    monkeypatch.setattr(gumbel_sample, "MAX_VOCAB", 8192)
    monkeypatch.setattr(gumbel_sample, "MAX_TOP_K", 8)
    with LaunchCounter() as c:
        got = top_k_gumbel_sample(logits, noise, 0.7, 9)
    assert not any(k.startswith("triton:") for k in c.launches)
    assert torch.equal(got, reference(logits, noise, 0.7, 9))
    assert top_k_gumbel_sample(logits[:0], noise[:0], 0.7, 9).shape == (0,)


def test_bad_arguments_are_clear_errors():
    logits, noise = torch.zeros(2, 8), torch.zeros(2, 8)
    for impl in (top_k_gumbel_sample, reference):
        for bad in (0.0, -1.0, float("nan"), "0.9", True):
            with pytest.raises(ValueError, match="top_k_gumbel_sample: temperature must be a positive number"):
                impl(logits, noise, bad, 3)
        for extreme in (1e-39, float("inf"), 1e38):  # reciprocal infinite, zero, subnormal
            with pytest.raises(ValueError, match="top_k_gumbel_sample: temperature must have a normal float32"):
                impl(logits, noise, extreme, 3)
        with pytest.raises(ValueError, match="top_k_gumbel_sample: noise must be float32"):
            impl(logits, noise.half(), 1.0, 3)
        for bad in (-1, True, 2.0):
            with pytest.raises(ValueError, match="top_k_gumbel_sample: top_k must be an int"):
                impl(logits, noise, 1.0, bad)
        with pytest.raises(ValueError, match="top_k_gumbel_sample: logits must be a float"):
            impl(logits.long(), noise, 1.0, 3)
        with pytest.raises(ValueError, match="unit stride"):
            impl(torch.zeros(8, 2).t(), noise, 1.0, 3)
