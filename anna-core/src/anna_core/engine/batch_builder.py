"""Input building: a scheduled step's sequences flattened into the model's device inputs.

:class:`BatchBuilder` turns a :class:`~anna_core.engine.sched_output.SchedulerOutput` into the
:class:`~anna_core.engine.forward_batch.ForwardBatch` of an eager pass (token ids, positions, per attention group
the padded block tables and the slot of each new token, state slots, the rows to sample, media rows and in-pass
snapshots), and gives the captured decode graphs the per-group tables and positions they stage. Every index
tensor is built on the host and copied without blocking (:func:`~anna_core.engine.sampler.host_tensor`).
"""

from __future__ import annotations

import torch

from anna_core.engine.cache_allocator import scratch_block
from anna_core.engine.checkpoint_plan import CheckpointTarget, SeqCheckpoints, build_checkpoints
from anna_core.engine.encoder_outputs import EncoderOutputs
from anna_core.engine.forward_batch import ForwardBatch, GroupTable
from anna_core.engine.sampler import host_tensor
from anna_core.engine.sched_output import SchedulerOutput
from anna_core.errors import AnnaError
from anna_core.layers.state_checkpoints import StateCheckpoints
from anna_core.model import ModelCaches


class BatchBuilder:
    """Builds a step's device inputs.

    Args:
        caches: the model's allocated caches (block size, groups, scratch blocks).
        device: the model's device.
        position_rows: rows of a token's position (3 for M-RoPE, else 1).
        own_positions: positions may differ from the cache index (media, M-RoPE): built per token from the
            request's :class:`~anna_core.multimodal.MultiModalInputs`.
        encoder: the encoder outputs a model with media holds (their rows spliced into the batch), or None.
        side_outputs: the model declares ``side_outputs`` (the batch carries each sequence's earlier ones).
        checkpoint_target: where snapshots taken inside a prefill pass go, or None.
    """

    def __init__(self, caches: ModelCaches, device: torch.device, *, position_rows: int, own_positions: bool,
                 encoder: EncoderOutputs | None, side_outputs: bool, checkpoint_target: CheckpointTarget | None):
        self.caches = caches
        self.device = device
        self.groups = [g for g, _ in caches.attention_caches]  # attention groups, in spec order
        self.position_rows = position_rows
        self.own_positions = own_positions
        self.encoder = encoder
        self.side_outputs = side_outputs
        self.checkpoint_target = checkpoint_target

    def build(self, out: SchedulerOutput) -> ForwardBatch:
        """Flatten the scheduled sequences into a :class:`ForwardBatch` on the device.

        Raises:
            AnnaError: the step carries in-pass snapshots but no :attr:`checkpoint_target` was given.
        """
        bs = self.caches.block_size
        input_ids: list[int] = []
        cu_seqlens = [0]
        seq_lens: list[int] = []
        query_lens: list[int] = []
        state_slots: list[int] = []
        logits_indices: list[int] = []
        num_rows = self.position_rows
        position_rows: list[list[int]] = [[] for _ in range(num_rows)]
        uniform = True  # every position row equal: no token of this step has media positions of its own
        for seq in out.seqs:
            n = seq.num_new_tokens
            input_ids += seq.token_ids
            mm = seq.request.multimodal if self.own_positions else None
            if mm is not None:
                uniform = uniform and (mm.positions is None or seq.start >= seq.request.num_prompt_tokens)
                for r, p in zip(position_rows, mm.position_rows(seq.start, seq.context_len,
                                                               seq.request.num_prompt_tokens, num_rows)):
                    r += p
            else:
                for r in position_rows:
                    r += range(seq.start, seq.start + n)
            cu_seqlens.append(cu_seqlens[-1] + n)
            seq_lens.append(seq.context_len)
            query_lens.append(n)
            state_slots.append(seq.state_slot)
            if seq.samples:
                logits_indices.append(cu_seqlens[-1] - 1)
        dev = self.device
        tables: list[GroupTable | None] = [None] * len(self.caches.groups)
        for g in self.groups:
            pad = scratch_block(self.caches, g)
            slot_mapping: list[int] = []
            for seq in out.seqs:
                table = seq.block_tables[g]
                slot_mapping += [table[p // bs] * bs + p % bs for p in range(seq.start, seq.context_len)]
            width = max(len(s.block_tables[g]) for s in out.seqs)
            rows = [s.block_tables[g] + [pad] * (width - len(s.block_tables[g])) for s in out.seqs]
            tables[g] = GroupTable(block_tables=host_tensor(rows, torch.int32, dev),
                                   slot_mapping=host_tensor(slot_mapping, torch.int64, dev))
        positions = host_tensor(position_rows if num_rows > 1 else position_rows[0], torch.int64, dev)
        embeds, embeds_mask = self.encoder.rows(out.seqs, cu_seqlens) if self.encoder is not None else (None, None)
        return ForwardBatch(
            checkpoints=self._checkpoints(out, cu_seqlens) if any(s.checkpoints for s in out.seqs) else None,
            embeds=embeds, embeds_mask=embeds_mask,
            input_ids=host_tensor(input_ids, torch.int64, dev),
            positions=positions,
            cu_seqlens=host_tensor(cu_seqlens, torch.int32, dev),
            seq_lens=host_tensor(seq_lens, torch.int32, dev),
            tables=tables,
            state_slots=host_tensor(state_slots, torch.int64, dev),
            logits_indices=host_tensor(logits_indices, torch.int64, dev),
            query_lens=query_lens,
            context_lens=seq_lens,
            is_decode=out.is_decode,
            uniform_positions=num_rows > 1 and uniform,
            media=[s.request.multimodal for s in out.seqs],
            side_outputs=[s.request.side_outputs for s in out.seqs] if self.side_outputs else [],
        )

    def _checkpoints(self, out: SchedulerOutput, cu_seqlens: list[int]) -> StateCheckpoints:
        """The in-pass snapshots of ``out``'s sequences (rows from ``cu_seqlens``).

        Raises:
            AnnaError: the scheduler planned them but no :attr:`checkpoint_target` was given.
        """
        target = self.checkpoint_target
        if target is None:
            raise AnnaError("a step carries in-pass state snapshots but the runner has no snapshot store")
        seqs = [SeqCheckpoints(row=cu_seqlens[i], num_rows=s.num_new_tokens, slot=s.state_slot,
                               points=[(p - s.start, idx) for p, idx, _ in s.checkpoints])
                for i, s in enumerate(out.seqs)]
        return build_checkpoints(seqs, target.conv_width, target.conv_store, target.recurrent_store, self.device)

    def decode_positions(self, out: SchedulerOutput) -> list[int] | None:
        """The position (every row) of each decode's token when the model has its own positions: its index
        plus the request's ``position_delta``; None otherwise (the index)."""
        if not self.own_positions:
            return None
        return [s.start + (s.request.multimodal.position_delta if s.request.multimodal is not None else 0)
                for s in out.seqs]

    def tables_by_group(self, out: SchedulerOutput) -> list[list[list[int]]]:
        """Per attention group (spec order), every sequence's block table."""
        return [[s.block_tables[g] for s in out.seqs] for g in self.groups]
