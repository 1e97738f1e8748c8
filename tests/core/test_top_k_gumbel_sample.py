"""The ``top_k_gumbel_sample`` reference: the Gumbel-max draw with the given noise picks each id of the top-k
filtered, tempered distribution with its probability (counted over many rows), never an id outside the top k, and
is the argmax of the tempered scores when the noise is flat."""

import torch
from anna_core.kernels.reference.sampling import top_k_gumbel_sample


def test_draws_follow_the_filtered_softmax():
    gen = torch.Generator().manual_seed(0)
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, 3.0])
    rows = 200_000
    u = torch.rand(rows, 6, generator=gen).clamp_(min=torch.finfo(torch.float32).tiny, max=1.0 - 1e-7)
    ids = top_k_gumbel_sample(logits.expand(rows, 6), torch.log(-torch.log(u)), 0.8, 3)
    counts = torch.bincount(ids, minlength=6).double() / rows
    want = torch.zeros(6, dtype=torch.float64)
    top = torch.tensor([5, 0, 1])  # the three largest
    want[top] = torch.softmax(logits[top].double() / 0.8, dim=0)
    assert counts[2:5].sum() == 0  # outside the top 3: never drawn
    torch.testing.assert_close(counts, want, atol=4e-3, rtol=0)  # ~4 standard errors at 200k draws


def test_flat_noise_is_the_argmax_and_bfloat16_rows_read_as_float32():
    logits = torch.randn(4, 33, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    ids = top_k_gumbel_sample(logits, torch.zeros(4, 33), 1.7, 5)
    assert torch.equal(ids, logits.float().argmax(dim=-1))
