"""Captured prefills: a fresh single-sequence prompt replays a device graph of its length bucket.

An eager prefill is as much host work as device work: a 9B prompt makes ~750 kernel launches, and the
host's Python takes about as long as the GPU needs for a long prompt (BENCHMARKS.md), so the time to
first token follows the host's CPU. Here, at start-up, the forward pass and the LM head of
a one-sequence prefill are captured for each length bucket ``T`` (:func:`prefill_buckets`). A prompt
of ``L <= T`` tokens then

1. writes its ids, KV slots, block table, state slot and ``L`` into page-locked staging (rows
   ``L..T-1`` are padding: id 0, K/V at their own positions of the block table padded with the
   scratch block, so attention reads nothing this step did not write),
2. copies them to the device in one non-blocking copy and replays the graph,
3. and gets the logits of its last token (``[1, vocab]`` float32), sampled eagerly by the caller.

The padding changes no state: the batch carries ``num_valid = [L]``, and layers with recurrent state
keep padding rows out of it (:mod:`anna_core.layers.padding`); causal attention keeps them out of
the real rows. Only models whose capabilities declare ``padded_prefill`` are captured. Only fresh prompts
qualify (no cached prefix, no earlier chunk: the conv state is rebuilt from the prompt alone), of at
most the largest bucket, in a step of their own; anything else runs eagerly.

A model with media or positions of its own (capabilities ``modalities`` / ``position_rows > 1``) gets its
positions staged per prompt (``[R, T]``), and, with media, a ``[T, hidden]`` float32 device buffer of
encoder outputs plus a staged row mask (``ForwardBatch.embeds`` / ``embeds_mask``): before the replay the
prompt's encoder-output rows are copied into the buffer on the device, so a multimodal prompt replays
its bucket's graph like a text prompt (whose mask is all False).

With in-pass state snapshots (prefix caching of a model with a recurrent cache group, :mod:`anna_core.layers.state_checkpoints`)
each bucket's graph runs the recurrent rule in rounds that end at every snapshot boundary inside the
bucket; the snapshot-store entry of each boundary is staged with the inputs, and boundaries the
scheduler did not reserve (or that lie in the padding) write the store's scratch entry.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch

from anna_core.device import Accelerator
from anna_core.engine.cache_allocator import scratch_block, scratch_slot
from anna_core.engine.checkpoint_plan import CheckpointTarget
from anna_core.engine.forward_batch import ForwardBatch, GroupTable
from anna_core.engine.graph_staging import Staging
from anna_core.errors import AnnaError
from anna_core.layers.state_checkpoints import CheckpointRound, StateCheckpoints
from anna_core.model import ModelCaches

log = logging.getLogger("anna.engine")

BUCKET_LADDER = (128, 192, 256, 384, 512, 768, 1024, 1536, 2048)
"""Captured prompt lengths: each step at most 1.5x the previous, so padding costs at most half the
device work of a prompt (a prompt just past a bucket). Prompts up to 2048 tokens are captured."""


def prefill_buckets(max_tokens: int) -> list[int]:
    """The lengths of :data:`BUCKET_LADDER` up to ``max_tokens`` (the longest prompt one step may hold)."""
    return [b for b in BUCKET_LADDER if b <= max_tokens]


class PrefillGraphs:
    """Bucketed one-sequence prefill graphs of one model over its caches.

    Args:
        model: a :class:`~anna_core.model.CausalLM` whose capabilities declare ``padded_prefill``.
        caches: its caches, with the scratch block and slot (:func:`~anna_core.engine.cache_allocator.allocate_caches`).
        accel: the device services; ``accel.graphs`` must be true to :meth:`capture`.
        buckets: the captured lengths, ascending (:func:`prefill_buckets`).
        max_blocks_per_seq: block-table width ``W`` (``ceil(max_model_len / block_size)``).
        checkpoints: where in-pass state snapshots go, or None (prompts with snapshots stay eager).
        position_rows: rows ``R`` of the model's positions.
        staged_positions: stage every prompt's positions (media / M-RoPE) instead of ``0 .. T-1``.
        hidden_size: the embedding width of a model with media (stages encoder outputs), or None.

    Raises:
        AnnaError: no bucket, a model without ``padded_prefill``, or a table narrower than the largest bucket.
    """

    def __init__(self, model: Any, caches: ModelCaches, accel: Accelerator, *, buckets: Sequence[int],
                 max_blocks_per_seq: int, checkpoints: CheckpointTarget | None = None, position_rows: int = 1,
                 staged_positions: bool = False, hidden_size: int | None = None):
        if not buckets:
            raise AnnaError("no prefill length to capture")
        if not model.capabilities.padded_prefill:
            raise AnnaError(f"{type(model).__name__} does not declare padded_prefill; its prefills stay eager")
        bs = caches.block_size
        self.buckets = sorted(int(b) for b in buckets)
        self.width = max(int(max_blocks_per_seq), -(-self.buckets[-1] // bs))
        self.model, self.caches, self.accel = model, caches, accel
        rows = self.buckets[-1]
        self.checkpoints = checkpoints
        # snapshot boundaries strictly inside the largest bucket (its end is captured after the step)
        self.num_boundaries = (rows - 1) // checkpoints.interval if checkpoints is not None else 0
        self.groups = [g for g, _ in caches.attention_caches]
        fields = [("input_ids", torch.int64, (rows,)), ("state_slots", torch.int64, (1,)),
                  ("last", torch.int64, (1,)), ("num_valid", torch.int64, (1,)),
                  ("snapshot_dst", torch.int64, (max(1, self.num_boundaries),))]
        for g in self.groups:
            fields += [(f"slot_mapping{g}", torch.int64, (rows,)), (f"block_tables{g}", torch.int32, (1, self.width))]
        self.position_rows = position_rows
        self.staged_positions = staged_positions or position_rows > 1
        self.media = hidden_size is not None
        if self.staged_positions:
            fields.append(("positions", torch.int64, (position_rows, rows)))
        if self.media:
            fields.append(("embeds_mask", torch.bool, (rows,)))
        self.staging = Staging(accel, fields)
        dev = accel.device
        # encoder outputs of the staged prompt's placeholder rows (float32: spliced in the embeddings' dtype)
        self.embeds = torch.zeros(rows, hidden_size, dtype=torch.float32, device=dev) if self.media else None
        self._positions = torch.arange(rows, dtype=torch.int64, device=dev)
        self._cu = {b: torch.tensor([0, b], dtype=torch.int32, device=dev) for b in self.buckets}
        self._lens = {b: torch.tensor([b], dtype=torch.int32, device=dev) for b in self.buckets}
        self.pad_blocks = {g: scratch_block(caches, g) for g in self.groups}
        self.logits_out: torch.Tensor | None = None
        self._graphs: dict[int, Any] = {}
        self._ckpt = {b: self._static_checkpoints(b) for b in self.buckets}

    def _static_checkpoints(self, t: int) -> StateCheckpoints | None:
        """Bucket ``t``'s rounds: one per snapshot interval, each boundary's state to its staged entry."""
        target = self.checkpoints
        k = (t - 1) // target.interval if target is not None else 0
        if k == 0:
            return None
        d, dev, iv, w = self.staging.d, self.accel.device, target.interval, target.conv_width
        cuts = [j * iv for j in range(k + 1)] + [t]
        rounds = [CheckpointRound(rows=slice(lo, hi), cu_seqlens=torch.tensor([0, hi - lo], dtype=torch.int32, device=dev),
                                  slots=d["state_slots"], save_slots=d["state_slots"] if j < k else None,
                                  save_dst=d["snapshot_dst"][j:j + 1] if j < k else None)
                  for j, (lo, hi) in enumerate(zip(cuts[:-1], cuts[1:]))]
        conv_rows = torch.tensor([[b - w + r for r in range(w)] for b in cuts[1:k + 1]], dtype=torch.int64, device=dev)
        return StateCheckpoints(rounds=rounds, conv_rows=conv_rows, conv_dst=d["snapshot_dst"][:k],
                                conv_store=target.conv_store, recurrent_store=target.recurrent_store)

    def bucket_for(self, n: int) -> int | None:
        """The smallest captured length holding ``n`` tokens (None when ``n`` exceeds the largest)."""
        return next((b for b in self.buckets if b >= n), None)

    def _batch(self, t: int) -> ForwardBatch:
        d = self.staging.d
        tables: list[GroupTable | None] = [None] * len(self.caches.groups)
        for g in self.groups:
            tables[g] = GroupTable(block_tables=d[f"block_tables{g}"], slot_mapping=d[f"slot_mapping{g}"][:t])
        positions = self._positions[:t]
        if self.staged_positions:
            positions = d["positions"][:, :t] if self.position_rows > 1 else d["positions"][0, :t]
        return ForwardBatch(
            embeds=self.embeds[:t] if self.media else None, embeds_mask=d["embeds_mask"][:t] if self.media else None,
            input_ids=d["input_ids"][:t], positions=positions, cu_seqlens=self._cu[t], seq_lens=self._lens[t],
            tables=tables, state_slots=d["state_slots"],
            logits_indices=d["last"], query_lens=[t], context_lens=[t], is_decode=False, num_valid=d["num_valid"],
            checkpoints=self._ckpt[t])

    def _step(self, t: int) -> None:
        """The captured work of bucket ``t``: forward pass, the last real row's logits into :attr:`logits_out`."""
        batch = self._batch(t)
        hidden = self.model(batch, self.caches)  # [t, hidden]
        logits = self.model.compute_logits(hidden.index_select(0, batch.logits_indices))  # [1, vocab] float32
        if self.logits_out is None:  # the first warm-up (eager, outside the graph pool) sizes it
            self.logits_out = torch.empty_like(logits)
        self.logits_out.copy_(logits)

    def _stage(self, token_ids: Sequence[int], block_tables: Sequence[Sequence[int]], state_slot: int, t: int,
               snapshots: Sequence[tuple[int, int]] = (), positions: Sequence[Sequence[int]] | None = None,
               media: Sequence[tuple[int, torch.Tensor, int, int]] = ()) -> None:
        n = len(token_ids)
        bs = self.caches.block_size
        self.staging.next_buffer()
        h = self.staging.h
        h["input_ids"][:n] = token_ids
        h["input_ids"][n:t] = 0
        if self.staged_positions:
            for r in range(self.position_rows):
                h["positions"][r, :n] = positions[r] if positions is not None else range(n)
                h["positions"][r, n:t] = range(n, t)  # padding rows: any position
        if self.media:
            h["embeds_mask"][:t] = False
            for row, _, _, k in media:
                h["embeds_mask"][row:row + k] = True
        # every row writes its K/V at its own position of the table padded with the scratch block, so the
        # padding rows' attention reads only values written by this step (never a freed block's leftovers;
        # the slots after the prompt in its last block are overwritten by its decodes before they are read)
        for g, block_table in zip(self.groups, block_tables):
            table = list(block_table) + [self.pad_blocks[g]] * (self.width - len(block_table))
            h[f"slot_mapping{g}"][:t] = [table[p // bs] * bs + p % bs for p in range(t)]
            h[f"block_tables{g}"][0, :] = table
        h["state_slots"][0] = state_slot
        h["last"][0] = n - 1
        h["num_valid"][0] = n
        if self.checkpoints is not None:
            iv = self.checkpoints.interval
            h["snapshot_dst"][:] = self.checkpoints.scratch
            for pos, idx in snapshots:
                h["snapshot_dst"][pos // iv - 1] = idx
        self.staging.upload()
        for row, emb, src, k in media:  # device copies, ordered before the replay
            self.embeds[row:row + k].copy_(emb[src:src + k])

    @torch.inference_mode()
    def capture(self, warmup_iters: int = 2) -> None:
        """Warm up and capture every bucket, largest first, sharing one memory pool. The inputs are all
        padding on the scratch block and slot, so capture touches no sequence's cache.

        Raises:
            AnnaError: the device cannot capture graphs.
        """
        if not self.accel.graphs:
            raise AnnaError(f"{self.accel.device} cannot capture graphs")
        pool = self.accel.graph_pool()
        slot = scratch_slot(self.caches)
        for t in reversed(self.buckets):
            self._stage([0] * t, [[] for _ in self.groups], slot, t)  # empty tables: every row on the scratch blocks
            with self.accel.side_stream():
                for _ in range(warmup_iters):
                    self._step(t)
            self.accel.synchronize()
            self._graphs[t] = self.accel.capture(lambda t=t: self._step(t), pool)
        self.accel.synchronize()
        log.info("captured prefill graphs for prompt lengths %s", self.buckets)

    def run(self, token_ids: Sequence[int], block_tables: Sequence[Sequence[int]], state_slot: int,
            snapshots: Sequence[tuple[int, int]] = (), positions: Sequence[Sequence[int]] | None = None,
            media: Sequence[tuple[int, torch.Tensor, int, int]] = ()) -> torch.Tensor:
        """Replay the graph of the smallest bucket holding this fresh prompt, without waiting for it.

        Args:
            token_ids: the prompt's ``L`` ids; block_tables: per attention group (the caches' order) its
            blocks (at least ``ceil(L / block_size)`` each);
            state_slot: its recurrent-state slot, already zeroed.
            snapshots: ``(position, snapshot-store entry)`` of the reserved boundaries inside the prompt
                (positions multiples of the interval, ``< L``).
            positions: ``R`` rows of ``L`` positions (graphs with ``staged_positions``; None: ``0 .. L-1``).
            media: ``(row, encoder output [m, hidden], first output row, rows)`` of each placeholder span
                (graphs captured with ``hidden_size``).

        Returns:
            ``[1, vocab]`` float32 logits of the last prompt token on the device: a view of the graphs'
            output buffer, valid until the next replay.

        Raises:
            AnnaError: an empty prompt, one longer than the largest bucket, a block table wider than
                the captured one, snapshots without a snapshot store or off the boundaries, or media for
                graphs captured without them.
        """
        n = len(token_ids)
        t = self.bucket_for(n) if n else None
        if t is None or t not in self._graphs:
            raise AnnaError(f"no captured prefill graph for a prompt of {n} tokens (captured: {sorted(self._graphs)})")
        if len(block_tables) != len(self.groups) or any(len(b) > self.width for b in block_tables):
            raise AnnaError(f"block tables of {[len(b) for b in block_tables]} blocks for {len(self.groups)} attention "
                            f"groups do not fit the captured width {self.width}")
        if snapshots and (self.checkpoints is None or any(p % self.checkpoints.interval or not 0 < p < n
                                                          for p, _ in snapshots)):
            raise AnnaError(f"snapshots at {[p for p, _ in snapshots]} do not fit a {n}-token prompt's graph")
        if media and not self.media:
            raise AnnaError("these prefill graphs were captured without media")
        self._stage(token_ids, block_tables, state_slot, t, snapshots, positions, media)
        self._graphs[t].replay()
        return self.logits_out
