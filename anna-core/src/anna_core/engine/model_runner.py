"""Runs one scheduled step: ForwardBatch on the device, forward, logits, sampling.

The ``.tolist()`` of the sampled ids is the step's only host sync; every index tensor is built on
the host and copied without blocking.
"""

from __future__ import annotations

from typing import Any

import torch

from anna_core.engine.cache_allocator import zero_slots
from anna_core.engine.forward_batch import ForwardBatch
from anna_core.engine.sampler import Sampler, host_tensor
from anna_core.engine.scheduler import SchedulerOutput
from anna_core.model import ModelCaches


class ModelRunner:
    """Owns the model, its caches and the sampler.

    Args:
        model: a :class:`~anna_core.model.CausalLM` module.
        caches: its allocated caches.
        device: the model's device.
        sampler: defaults to :class:`Sampler`.
    """

    def __init__(self, model: Any, caches: ModelCaches, device: torch.device, sampler: Sampler | None = None):
        self.model = model
        self.caches = caches
        self.device = device
        self.sampler = sampler or Sampler()

    def build_batch(self, out: SchedulerOutput) -> ForwardBatch:
        """Flatten the scheduled sequences into a :class:`ForwardBatch` on the device."""
        bs = self.caches.block_size
        input_ids: list[int] = []
        positions: list[int] = []
        slot_mapping: list[int] = []
        cu_seqlens = [0]
        seq_lens: list[int] = []
        query_lens: list[int] = []
        state_slots: list[int] = []
        logits_indices: list[int] = []
        for seq in out.seqs:
            n = seq.num_new_tokens
            table = seq.block_table
            input_ids += seq.token_ids
            pos = range(seq.start, seq.start + n)
            positions += pos
            slot_mapping += [table[p // bs] * bs + p % bs for p in pos]
            cu_seqlens.append(cu_seqlens[-1] + n)
            seq_lens.append(seq.context_len)
            query_lens.append(n)
            state_slots.append(seq.state_slot)
            if seq.samples:
                logits_indices.append(cu_seqlens[-1] - 1)
        width = max(len(s.block_table) for s in out.seqs)
        tables = [s.block_table + [0] * (width - len(s.block_table)) for s in out.seqs]
        dev = self.device
        return ForwardBatch(
            input_ids=host_tensor(input_ids, torch.int64, dev),
            positions=host_tensor(positions, torch.int64, dev),
            cu_seqlens=host_tensor(cu_seqlens, torch.int32, dev),
            seq_lens=host_tensor(seq_lens, torch.int32, dev),
            block_tables=host_tensor(tables, torch.int32, dev),
            slot_mapping=host_tensor(slot_mapping, torch.int64, dev),
            state_slots=host_tensor(state_slots, torch.int64, dev),
            logits_indices=host_tensor(logits_indices, torch.int64, dev),
            query_lens=query_lens,
            context_lens=seq_lens,
            is_decode=out.is_decode,
        )

    @torch.inference_mode()
    def execute(self, out: SchedulerOutput) -> dict[str, int]:
        """Run the step; returns request id -> sampled token for every sequence that samples."""
        fresh = [s.state_slot for s in out.seqs if s.is_fresh]
        if fresh and (self.caches.conv_states or self.caches.recurrent_states):
            zero_slots(self.caches, host_tensor(fresh, torch.int64, self.device))
        batch = self.build_batch(out)
        hidden = self.model(batch, self.caches)  # [T, hidden]
        samplers = [s.request for s in out.seqs if s.samples]
        if not samplers:
            return {}
        logits = self.model.compute_logits(hidden[batch.logits_indices])  # [N, vocab]
        ids = self.sampler(logits, samplers).tolist()  # the step's one host sync
        return {r.request_id: t for r, t in zip(samplers, ids)}
