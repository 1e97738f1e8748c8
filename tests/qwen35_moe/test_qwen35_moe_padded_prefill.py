"""A padded single-sequence prefill of a Qwen3.5 MoE model (``ForwardBatch.num_valid``, what a captured
prefill graph runs) leaves the caches and last-token logits of the unpadded prefill: the padding rows are
routed to experts too, but the MoE blocks are row-wise, so they write only their own rows."""

from __future__ import annotations

import pytest
import torch
from anna_core.engine.cache_allocator import scratch_block, zeroed_caches

from tests.qwen35.conftest import load_anna
from tests.qwen35.test_qwen35_padded_prefill import _batch

BS = 4


@pytest.mark.parametrize("n", [3, 9])  # shorter than the conv window; two blocks and a bit
def test_padded_prefill_leaves_the_caches_and_logits_of_the_unpadded_one(tiny_moe_factory, n):
    model = load_anna(tiny_moe_factory(num_experts=16, top_k=4)).model
    assert model.capabilities.padded_prefill
    caches = zeroed_caches(model.cache_spec, num_blocks=9, block_size=BS, num_slots=2, device=torch.device("cpu"),
                           dtype=torch.float32)
    pad, total = scratch_block(caches, 0), 15
    ids = torch.randint(3, 320, (n,), generator=torch.Generator().manual_seed(n)).tolist()
    with torch.inference_mode():
        ref = model.compute_logits(model(_batch(ids, n, [0, 1, 2], 0, BS, pad), caches)[n - 1:n])
        padded = _batch(ids, total, [4, 5, 6, pad], 1, BS, pad, num_valid=n)  # other blocks, another slot
        got = model.compute_logits(model(padded, caches)[n - 1:n])
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    assert torch.equal(got.argmax(-1), ref.argmax(-1))
    state = caches.state_caches[0]
    for conv, recurrent in zip(state.conv, state.recurrent):
        assert recurrent[0].abs().max() > 0
        torch.testing.assert_close(conv[1], conv[0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(recurrent[1], recurrent[0], rtol=1e-5, atol=1e-5)
    for k, v in caches.kv_pairs():
        for cache in (k, v):
            flat = cache.view(-1, *cache.shape[2:])
            # the experts' GEMMs of padded and unpadded runs have other row counts: float32 rounding apart
            torch.testing.assert_close(flat[4 * BS:4 * BS + n], flat[:n], rtol=1e-5, atol=1e-5)
