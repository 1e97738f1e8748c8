"""A padded single-sequence prefill (``ForwardBatch.num_valid``, what a captured prefill graph runs)
leaves exactly the K/V and last-token logits of the unpadded prefill of the same prompt, in both cache
groups: what ``ModelCapabilities(padded_prefill=True)`` promises."""

from __future__ import annotations

import pytest
import torch
from anna_core.engine.cache_allocator import zeroed_caches
from anna_core.engine.forward_batch import ForwardBatch, GroupTable

from tests.gemma4.conftest import load_anna
from tests.gemma4.tiny import VARIANTS

BS = 4
BLOCKS = 16  # block 16 is the scratch block (zeroed_caches gives exactly BLOCKS + 1)


def _batch(ids, total, table, groups, num_valid=None):
    n = len(ids)
    ids = ids + [0] * (total - n)
    slots = [table[p // BS] * BS + p % BS for p in range(total)]
    t = lambda v, dt: torch.tensor(v, dtype=dt)  # noqa: E731
    group = GroupTable(block_tables=t([table], torch.int32), slot_mapping=t(slots, torch.int64))
    return ForwardBatch(
        input_ids=t(ids, torch.int64), positions=torch.arange(total), cu_seqlens=t([0, total], torch.int32),
        seq_lens=t([total], torch.int32), tables=[group] * groups, state_slots=t([0], torch.int64),
        logits_indices=t([n - 1], torch.int64), query_lens=[total], context_lens=[total], is_decode=False,
        num_valid=None if num_valid is None else t([num_valid], torch.int64))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("n", [3, 21, 24])  # inside the first window, past it mid-block, whole blocks
def test_padded_prefill_leaves_the_caches_and_logits_of_the_unpadded_one(gemma4_factory, variant, n):
    model = load_anna(gemma4_factory(variant=variant, layout="causal")).model
    assert model.capabilities.padded_prefill
    spec = model.cache_spec
    caches = zeroed_caches(spec, num_blocks=BLOCKS + 1, block_size=BS, num_slots=1, device=torch.device("cpu"),
                           dtype=torch.float32)
    total = 31
    ids = torch.randint(3, 320, (n,), generator=torch.Generator().manual_seed(n)).tolist()
    own = list(range(-(-n // BS)))  # blocks 0.. for the unpadded run
    padded_table = [8 + i for i in range(-(-n // BS))]
    padded_table += [BLOCKS] * (-(-total // BS) - len(padded_table))  # padding rows write to the scratch block
    with torch.inference_mode():
        ref = model.compute_logits(model(_batch(ids, n, own, len(spec.groups)), caches)[n - 1:n])
        got = model.compute_logits(model(_batch(ids, total, padded_table, len(spec.groups), num_valid=n),
                                         caches)[n - 1:n])
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    assert torch.equal(got.argmax(-1), ref.argmax(-1))
    for k, v in caches.kv_pairs():  # every owning layer of both groups
        for cache in (k, v):
            flat = cache.view(-1, *cache.shape[2:])
            a = flat[[own[p // BS] * BS + p % BS for p in range(n)]]
            b = flat[[padded_table[p // BS] * BS + p % BS for p in range(n)]]
            assert a.abs().max() > 0
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)  # GEMMs of 31 vs n rows round apart
