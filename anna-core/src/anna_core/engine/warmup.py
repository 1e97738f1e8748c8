"""The start-up warm-up: forward passes on the scratch block and slot, so the first request pays no kernel
compile or autotune (:meth:`anna_core.engine.model_runner.ModelRunner.setup` runs it before capturing graphs)."""

from __future__ import annotations

import torch

from anna_core.device import Accelerator
from anna_core.engine.cache_allocator import has_state, scratch_block, scratch_slot, zero_slots
from anna_core.engine.forward_batch import ForwardBatch, GroupTable
from anna_core.model import ModelCaches

WARMUP_LONG_PREFILL = 1024
"""Tokens of the long warm-up prefill run at start-up on an accelerator."""


@torch.inference_mode()
def warm_up(model, caches: ModelCaches, accel: Accelerator, max_model_len: int, position_rows: int = 1) -> None:
    """Prefills and one decode on the scratch block and slot (compiles and autotunes kernels
    before the first request; touches no sequence's cache).

    On an accelerator, long prefills (up to :data:`WARMUP_LONG_PREFILL` tokens) and prefill
    chunks over a long context run first, so the kernel variants of long prompts and of chunked
    prefills are compiled and tuned at start-up rather than inside the first such request; then
    a short prefill and a decode step follow; then a prefill of two prompts in one batch.

    Args:
        model: the :class:`~anna_core.model.CausalLM`; caches: its caches; accel: its device's services.
        max_model_len: the longest sequence served; position_rows: rows of the model's positions.
    """
    bs = caches.block_size
    n = max(1, min(bs, max_model_len - 1))
    slot = scratch_slot(caches)
    dev = accel.device
    slots = torch.tensor([slot], dtype=torch.int64, device=dev)
    plan = [(0, n), (n, 1)]
    long_n = min(WARMUP_LONG_PREFILL, max_model_len - 1)
    if dev.type != "cpu" and long_n > 8 * n:
        # long prompts (attention without key splits) and prefill chunks over a long context
        # (with splits), each at a length that is a multiple of 16 and one that is not: Triton
        # specialises integer arguments on divisibility by 16, so these cover every variant
        odd = long_n - 5 - (long_n - 5) % 16 + 13
        plan[:0] = [(0, long_n), (0, odd), (long_n - 4 * n, 4 * n), (long_n - 4 * n + 3, 4 * n - 3)]
    recurrent = has_state(caches)
    for start, count in plan:
        if start == 0 and recurrent:
            zero_slots(caches, slots)
        forward_on_scratch(model, caches, [(start, count)], slots, position_rows=position_rows)
    if dev.type != "cpu" and long_n > 8 * n:
        # two prompts in one batch take kernel variants one prompt does not (fla's chunked rule compiles
        # its variable-length form separately); state slot 0 is free during set-up, zeroed after
        two = torch.tensor([slot, 0], dtype=torch.int64, device=dev)
        forward_on_scratch(model, caches, [(0, long_n // 2), (0, long_n // 2 - 3)], two, zero_states=recurrent,
                           position_rows=position_rows)
    accel.synchronize()


def forward_on_scratch(model, caches: ModelCaches, seqs: list[tuple[int, int]], slots: torch.Tensor, *,
                       zero_states: bool = False, position_rows: int = 1) -> None:
    """Run the model and LM head on sequences ``(start, count)`` whose K/V all go to the scratch block,
    their states in ``slots`` (``[len(seqs)]`` int64 on the caches' device; zeroed before and after with
    ``zero_states``)."""
    bs, dev = caches.block_size, slots.device
    if zero_states:
        zero_slots(caches, slots)
    pos = [p for start, count in seqs for p in range(start, start + count)]
    ctx = [start + count for start, count in seqs]
    cu = [0]
    for _, count in seqs:
        cu.append(cu[-1] + count)
    t = lambda v, dt: torch.tensor(v, dtype=dt, device=dev)  # noqa: E731
    tables: list[GroupTable | None] = [None] * len(caches.groups)
    for g, _ in caches.attention_caches:
        blk = scratch_block(caches, g)
        tables[g] = GroupTable(block_tables=t([[blk] * -(-max(ctx) // bs)] * len(seqs), torch.int32),
                               slot_mapping=t([blk * bs + p % bs for p in pos], torch.int64))
    positions = t(pos, torch.int64)
    if position_rows > 1:
        positions = positions.expand(position_rows, -1)
    batch = ForwardBatch(
        input_ids=torch.zeros(len(pos), dtype=torch.int64, device=dev), positions=positions,
        cu_seqlens=t(cu, torch.int32), seq_lens=t(ctx, torch.int32), tables=tables, state_slots=slots,
        logits_indices=t([c - 1 for c in cu[1:]], torch.int64), query_lens=[count for _, count in seqs],
        context_lens=ctx, is_decode=all(count == 1 for _, count in seqs),
    )
    hidden = model(batch, caches)
    model.compute_logits(hidden[batch.logits_indices]).argmax(-1)
    if zero_states:
        zero_slots(caches, slots)
