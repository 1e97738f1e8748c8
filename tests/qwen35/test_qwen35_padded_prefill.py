"""A padded single-sequence prefill (``ForwardBatch.num_valid``, what a captured prefill graph runs)
leaves exactly the caches and last-token logits of the unpadded prefill of the same prompt."""

from __future__ import annotations

import pytest
import torch
from anna_core.engine.cache_allocator import scratch_block, zero_slots
from anna_core.engine.forward_batch import ForwardBatch, GroupTable
from anna_core.layers.padding import mask_rows, row_mask, write_conv_state

from tests.bench.tiny_config import write_tiny_qwen35_config


def _batch(ids, total, table, slot, bs, pad_block, num_valid=None):
    n = len(ids)
    ids = ids + [0] * (total - n)
    slots = [table[p // bs] * bs + p % bs if p < n else pad_block * bs for p in range(total)]
    t = lambda v, dt: torch.tensor(v, dtype=dt)  # noqa: E731
    return ForwardBatch(
        input_ids=t(ids, torch.int64), positions=torch.arange(total), cu_seqlens=t([0, total], torch.int32),
        seq_lens=t([total], torch.int32),
        tables=[GroupTable(block_tables=t([table], torch.int32), slot_mapping=t(slots, torch.int64)), None],
        state_slots=t([slot], torch.int64), logits_indices=t([n - 1], torch.int64), query_lens=[total],
        context_lens=[total], is_decode=False, num_valid=None if num_valid is None else t([num_valid], torch.int64))


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from anna_core.bench.engine_bench import engine_config
    from anna_core.engine.llm_engine import LLMEngine
    from anna_core.loading import load_model

    loaded = load_model(write_tiny_qwen35_config(tmp_path_factory.mktemp("pad")), device="cpu", dtype="fp32",
                        load_format="dummy")
    return LLMEngine.from_loaded(loaded, engine_config(2, 64, 64, block_size=4))


@pytest.mark.parametrize("n", [2, 7, 8])  # shorter than the conv window, mid-block, a whole number of blocks
def test_padded_prefill_leaves_the_caches_and_logits_of_the_unpadded_one(engine, n):
    model, caches = engine.runner.model, engine.runner.caches
    bs, pad = caches.block_size, scratch_block(caches, 0)
    total = 13
    ids = torch.randint(2, 256, (n,), generator=torch.Generator().manual_seed(n)).tolist()
    zero_slots(caches, torch.tensor([0, 1]))
    with torch.inference_mode():
        ref = model.compute_logits(model(_batch(ids, n, [0, 1], 0, bs, pad), caches)[n - 1:n])
        # the padded run writes to other blocks and another slot; its table is padded with the scratch block
        padded = _batch(ids, total, [2, 3, pad, pad], 1, bs, pad, num_valid=n)
        got = model.compute_logits(model(padded, caches)[n - 1:n])
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    assert torch.equal(got.argmax(-1), ref.argmax(-1))
    for conv in caches.state_caches[0].conv:
        assert conv[0].abs().max() > 0
        torch.testing.assert_close(conv[1], conv[0], rtol=1e-5, atol=1e-6)  # the last real inputs (GEMMs of 13 vs n rows round apart)
    for state in caches.state_caches[0].recurrent:
        assert state[0].abs().max() > 0  # the prompt wrote it
        torch.testing.assert_close(state[1], state[0], rtol=1e-5, atol=1e-6)
    for k, v in caches.kv_pairs():
        for cache in (k, v):
            flat = cache.view(-1, *cache.shape[2:])
            a = flat[[0 * bs + p if p < bs else 1 * bs + p - bs for p in range(n)]]
            b = flat[[2 * bs + p if p < bs else 3 * bs + p - bs for p in range(n)]]
            torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-6)


def test_padding_rows_are_masked_and_the_conv_state_ends_at_the_last_real_row():
    x = torch.arange(12.0).view(6, 2)
    valid = torch.tensor([4])
    assert row_mask(6, valid).tolist() == [True] * 4 + [False] * 2
    assert mask_rows(x, valid, float("-inf"))[4:].isinf().all() and torch.equal(mask_rows(x, valid, 0.0)[:4], x[:4])
    states = torch.full((3, 2, 3), 9.0)
    write_conv_state(states, torch.tensor([1]), x, valid)
    assert states[1].tolist() == [[2.0, 4.0, 6.0], [3.0, 5.0, 7.0]]  # rows 1..3 of x, oldest first, per channel
    assert (states[[0, 2]] == 9).all()  # other slots untouched
    write_conv_state(states, torch.tensor([2]), x, torch.tensor([1]))  # one real row: zeros before the prompt
    assert states[2].tolist() == [[0.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
