"""Captured decode steps: one device graph per batch-size bucket, replayed over static buffers.

A decode step (every sequence contributes one token) runs the whole model, the LM head and the
batched sampler. At start-up, for each bucket ``b`` (1, 2, 4, 8, ... up to the largest batch) and
each sampling mode (``"greedy"``: argmax only; ``"sample"``: :func:`~anna_core.engine.sampler.sample_no_sync`
with per-row temperature / top-k / top-p / min-p / seed; ``"sample_plain"``: temperature and seed only,
:func:`~anna_core.engine.sampler.sample_plain_no_sync`, which does not sort the vocabulary, for steps whose
rows filter nothing, e.g. OpenAI's defaults; ``"logits"``: no sampling, the float32
logits stay in the graph's output buffer for the eager sampler, for the requests the captured
sampler does not serve: penalties, ``min_tokens``, logit bias, grammars, logprobs), the step is
warmed up and captured over static device buffers. A step of ``n`` sequences then

1. writes its inputs into one page-locked host staging buffer (rows ``n..b-1`` are padding that
   reads and writes only the scratch KV block and state slot, see
   :func:`~anna_core.engine.cache_allocator.scratch_block`),
2. copies it to the device in one non-blocking copy (:meth:`~anna_core.engine.graph_staging.Staging.upload`; the
   same device buffer holds the last replay's sampled ids right before the staged ids, so the step gathers each
   row's input token from both without a copy),
3. replays the graph of the smallest bucket ``>= n``,
4. and enqueues the copy of the ``n`` sampled ids (with a model that declares ``side_outputs``, also of its side
   outputs, which the captured step gathers into a static buffer after sampling) to page-locked host memory; the
   caller reads
   them (the step's one host sync) when it needs them, possibly after staging and replaying the
   next step, whose rows may take their input token straight from this step's sampled ids on the
   device (``prev_rows``). In mode ``"logits"`` (:meth:`DecodeGraphs.run_logits`) the replay leaves
   the logits in ``logits_out[:n]`` instead, for the caller's eager sampler.

Nothing inside the captured region reads device values on the host or depends on ``n``. The
device services (graph objects, streams, pinned memory) come from :class:`anna_core.device.Accelerator`,
so a fake accelerator exercises this logic on the CPU in tests.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from anna_core.device import Accelerator
from anna_core.engine.cache_allocator import scratch_block, scratch_slot
from anna_core.engine.forward_batch import ForwardBatch, GroupTable
from anna_core.engine.graph_staging import IdsReadback, PendingIds, Staging
from anna_core.engine.sampler import sample_no_sync, sample_plain_no_sync, sample_topk_no_sync
from anna_core.errors import AnnaError
from anna_core.model import ModelCaches

log = logging.getLogger("anna.engine")

MODES = ("greedy", "sample", "sample_plain", "logits")
"""Sampling modes captured per bucket (``"logits"``: forward and LM head only, see :meth:`DecodeGraphs.run_logits`)."""

TOPK_MODES = ("topk_greedy", "topk_sample", "topk")
"""The modes of the fused top-k LM head (``topk`` of :class:`DecodeGraphs`; :mod:`anna_core.engine.topk_head`):
``"topk_greedy"`` (the first candidate), ``"topk_sample"`` (:func:`~anna_core.engine.sampler.sample_topk_no_sync`)
and ``"topk"`` (no sampling: the candidates stay in the graph's output buffers, :meth:`DecodeGraphs.run_topk`, for
rows that want logprobs)."""

# int64 fields of the staging buffer, one per row (per attention group g: "slot_mapping{g}" int64 [B] and
# "block_tables{g}" int32 [B, W] follow).
_I64 = ("input_ids", "token_index", "positions", "state_slots", "top_k", "seeds", "steps")
_F32 = ("temperature", "top_p", "min_p")
_I32 = ("seq_lens",)


def bucket_sizes(max_batch: int) -> list[int]:
    """Powers of two below ``max_batch``, then ``max_batch`` itself: ``7 -> [1, 2, 4, 7]``.

    Raises:
        AnnaError: ``max_batch < 1``.
    """
    if max_batch < 1:
        raise AnnaError(f"the largest graph batch must be at least 1, got {max_batch}")
    sizes, b = [], 1
    while b < max_batch:
        sizes.append(b)
        b *= 2
    return sizes + [max_batch]


class DecodeGraphs:
    """Bucketed decode graphs of one model over its caches.

    Args:
        model: a :class:`~anna_core.model.CausalLM` (``forward`` + ``compute_logits``).
        caches: its caches, allocated with scratch entries (:func:`~anna_core.engine.cache_allocator.allocate_caches`).
        accel: the device services; ``accel.graphs`` must be true to :meth:`capture`.
        max_batch: the largest decode batch captured (the engine's ``max_num_seqs``).
        max_blocks_per_seq: block-table width ``W`` (``ceil(max_model_len / block_size)``).
        vocab_size: rows of the LM head (for neutral top-k values).
        compile_fn: wraps the forward + logits function before capture (``torch.compile``), or None.
        modes: sampling modes to capture (subset of :data:`MODES`).
        position_rows: rows ``R`` of the model's positions (M-RoPE: 3; a decode token has one position,
            repeated in every row).
        staged_positions: the model's positions may differ from the cache index (media, M-RoPE): they are
            staged per row (``rope_positions`` of :meth:`run`) instead of taken from the index.
        topk: the candidates per row of the fused top-k head's modes (:data:`TOPK_MODES`, through the model's
            ``compute_topk``), or None when ``modes`` has none of them.
        side_outputs: the model declares ``side_outputs``: every captured step ends by gathering
            ``model.gather_side_outputs(state_slots)`` of its rows into :attr:`side_out` (``[rows, ...]``, allocated by
            the first warm-up at the shape and dtype the model gives), and :meth:`run` copies the step's rows of it to
            the host with its ids (:meth:`~anna_core.engine.graph_staging.PendingIds.side_outputs`).
        greedy_head: the model declares ``greedy_head``: the ``"greedy"`` mode takes its ``compute_greedy(hidden)``
            (the ids without the logits, e.g. one op fusing the argmax into a soft-capped head) instead of
            ``compute_logits`` and ``argmax``.

    Raises:
        AnnaError: a non-positive size.
    """

    def __init__(self, model: Any, caches: ModelCaches, accel: Accelerator, *, max_batch: int,
                 max_blocks_per_seq: int, vocab_size: int, compile_fn: Callable | None = None,
                 modes: Sequence[str] = MODES, position_rows: int = 1, staged_positions: bool = False,
                 topk: int | None = None, side_outputs: bool = False, greedy_head: bool = False):
        if max_blocks_per_seq < 1 or vocab_size < 1:
            raise AnnaError("max_blocks_per_seq and vocab_size must be positive")
        unknown = set(modes) - set(MODES + TOPK_MODES)
        if unknown:
            raise AnnaError(f"unknown sampling modes {sorted(unknown)}; use {MODES + TOPK_MODES}")
        if (topk is None) == bool(set(modes) & set(TOPK_MODES)):
            raise AnnaError("the fused top-k head's modes need topk (its candidates per row), and topk needs them")
        self.topk = topk
        self.model = model
        self.caches = caches
        self.accel = accel
        self.buckets = bucket_sizes(max_batch)
        self.width = max_blocks_per_seq
        self.vocab_size = vocab_size
        self.modes = tuple(modes)
        self._forward = compile_fn(self._forward_logits) if compile_fn else self._forward_logits
        self._forward_topk = compile_fn(self._forward_candidates) if compile_fn else self._forward_candidates
        self.greedy_head = greedy_head
        self._forward_greedy = compile_fn(self._forward_ids) if compile_fn else self._forward_ids
        # the "topk" graphs' outputs: values [rows, topk] float32, indices [rows, topk] int64, logsumexp [rows]
        self.topk_out: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        rows = self.buckets[-1]
        self.groups = [g for g, _ in caches.attention_caches]
        self.position_rows = position_rows
        self.staged_positions = staged_positions or position_rows > 1
        # "sampled" (written by the device: the last sampling replay's ids) lies right before "input_ids" (this step's
        # staged ids), so that one gather over both picks each row's input token
        fields = ([("sampled", torch.int64, (rows,))] + [(n, torch.int64, (rows,)) for n in _I64]
                  + [(n, torch.float32, (rows,)) for n in _F32] + [(n, torch.int32, (rows,)) for n in _I32])
        if self.staged_positions:
            fields.append(("rope_positions", torch.int64, (rows,)))
        for g in self.groups:
            fields += [(f"slot_mapping{g}", torch.int64, (rows,)), (f"block_tables{g}", torch.int32, (rows, self.width))]
        # a step uploads the block tables of its bucket's rows only (each row is max_model_len / block_size wide)
        self.staging = Staging(accel, fields, row_fields=[f"block_tables{g}" for g in self.groups],
                               device_fields=["sampled"])
        self.rows = rows
        # tokens[:rows]: the ids sampled by the last sampling replay; tokens[rows:]: this step's staged ids (both
        # views of the staging buffer: no copy of the staged ids inside the step)
        self.tokens = self.staging.device[:2 * rows * 8].view(torch.int64)
        if self.tokens[rows:].data_ptr() != self.staging.d["input_ids"].data_ptr():
            raise RuntimeError("the staged input ids must follow the sampled ids in the staging buffer")
        self.out = self.staging.d["sampled"]
        self.readback = IdsReadback(accel, rows)
        self._cu = torch.arange(rows + 1, dtype=torch.int32, device=accel.device)
        self._rows = torch.arange(rows, dtype=torch.int64, device=accel.device)
        self.pad_blocks = {g: scratch_block(caches, g) for g in self.groups}
        self.pad_slot = scratch_slot(caches)
        self._graphs: dict[tuple[int, str], Any] = {}
        # the "logits" graphs' output [rows, logits width] float32, one for all buckets: allocated by the
        # first warm-up (eager, outside the graph pool) at the width the model's logits really have
        self.logits_out: torch.Tensor | None = None
        self.side_outputs = side_outputs
        # the side outputs of the last replay's rows [rows, ...] (side_outputs only; allocated by the first warm-up)
        self.side_out: torch.Tensor | None = None
        self._fill_padding(0)

    # -- capture ------------------------------------------------------------------------------

    def _batch(self, b: int) -> ForwardBatch:
        d = self.staging.d
        # each row's input token: staged from the host (token_index >= rows), or sampled by the previous replay
        # (token_index < rows) when the engine scheduled this step before reading that one back
        input_ids = self.tokens.index_select(0, d["token_index"][:b])
        tables: list[GroupTable | None] = [None] * len(self.caches.groups)
        for g in self.groups:
            tables[g] = GroupTable(block_tables=d[f"block_tables{g}"][:b], slot_mapping=d[f"slot_mapping{g}"][:b])
        positions = d["positions"][:b]
        if self.staged_positions:
            positions = d["rope_positions"][:b]
            if self.position_rows > 1:
                positions = positions.expand(self.position_rows, b)
        return ForwardBatch(
            input_ids=input_ids, positions=positions, cu_seqlens=self._cu[:b + 1],
            seq_lens=d["seq_lens"][:b], tables=tables,
            state_slots=d["state_slots"][:b], logits_indices=self._rows[:b], query_lens=[1] * b,
            context_lens=[1] * b, is_decode=True, uniform_positions=self.position_rows > 1,
        )

    def _forward_logits(self, batch: ForwardBatch) -> torch.Tensor:
        hidden = self.model(batch, self.caches)  # [b, hidden]: every row samples
        return self.model.compute_logits(hidden)  # [b, vocab] float32

    def _forward_ids(self, batch: ForwardBatch) -> torch.Tensor:
        hidden = self.model(batch, self.caches)  # [b, hidden]
        return self.model.compute_greedy(hidden)  # [b] int64

    def _forward_candidates(self, batch: ForwardBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        hidden = self.model(batch, self.caches)  # [b, hidden]
        return self.model.compute_topk(hidden, self.topk)  # [b, topk] float32, [b, topk] int64, [b] float32

    def _step_topk(self, b: int, mode: str) -> None:
        """The captured work of bucket ``b`` in a fused top-k mode: forward, the top-k head, the candidates'
        sampler (or, with ``"topk"``, the candidates into ``self.topk_out``)."""
        values, indices, lse = self._forward_topk(self._batch(b))
        if mode == "topk":
            if self.topk_out is None:
                dev = values.device
                self.topk_out = (torch.empty((self.rows, self.topk), dtype=torch.float32, device=dev),
                                 torch.empty((self.rows, self.topk), dtype=torch.int64, device=dev),
                                 torch.empty((self.rows,), dtype=torch.float32, device=dev))
            for buf, t in zip(self.topk_out, (values, indices, lse)):
                buf[:b].copy_(t)
            return
        if mode == "topk_greedy":
            ids = indices[:, 0]
        else:
            d = self.staging.d
            ids = sample_topk_no_sync(values, indices, d["temperature"][:b], d["top_k"][:b], d["top_p"][:b],
                                      d["min_p"][:b], d["seeds"][:b], d["steps"][:b])[0]
        self.out[:b].copy_(ids)

    def _step(self, b: int, mode: str) -> None:
        """The captured work of bucket ``b``: forward, logits, sampling, ids into ``self.out`` (with
        ``"logits"``: the logits into ``self.logits_out[:b]``; the top-k modes: :meth:`_step_topk`), then the rows'
        side outputs into ``self.side_out[:b]`` (``side_outputs``)."""
        if mode in TOPK_MODES:
            self._step_topk(b, mode)
        else:
            self._step_full(b, mode)
        if self.side_outputs:
            side = self.model.gather_side_outputs(self.staging.d["state_slots"][:b])  # [b, ...]
            if self.side_out is None:
                self.side_out = torch.empty((self.rows, *side.shape[1:]), dtype=side.dtype, device=side.device)
            self.side_out[:b].copy_(side)

    def _step_full(self, b: int, mode: str) -> None:
        """:meth:`_step`'s forward, full LM head and sampling (or logits); greedy with ``greedy_head``: the model's
        ids."""
        if mode == "greedy" and self.greedy_head:
            self.out[:b].copy_(self._forward_greedy(self._batch(b)))
            return
        logits = self._forward(self._batch(b))
        if mode == "logits":
            if self.logits_out is None:
                self.logits_out = torch.empty((self.rows, logits.shape[-1]), dtype=torch.float32, device=logits.device)
            self.logits_out[:b].copy_(logits)
            return
        d = self.staging.d
        if mode == "greedy":  # the argmax writes the ids in place (no copy after it)
            torch.argmax(logits, dim=-1, out=self.out[:b])
            return
        if mode == "sample_plain":
            ids = sample_plain_no_sync(logits, d["temperature"][:b], d["seeds"][:b], d["steps"][:b])
        else:
            ids = sample_no_sync(logits, d["temperature"][:b], d["top_k"][:b], d["top_p"][:b], d["min_p"][:b],
                                 d["seeds"][:b], d["steps"][:b])
        self.out[:b].copy_(ids)

    @torch.inference_mode()
    def capture(self, warmup_iters: int = 2) -> None:
        """Warm up and capture every (bucket, mode), largest bucket first, sharing one memory pool.

        Padding inputs (scratch block / slot) are staged, so capture touches no sequence's cache.

        Raises:
            AnnaError: the device cannot capture graphs.
        """
        if not self.accel.graphs:
            raise AnnaError(f"{self.accel.device} cannot capture graphs")
        self._fill_padding(0)
        self.staging.upload()
        pool = self.accel.graph_pool()
        for b in reversed(self.buckets):
            for mode in self.modes:
                with self.accel.side_stream():
                    for _ in range(warmup_iters):
                        self._step(b, mode)
                self.accel.synchronize()
                self._graphs[(b, mode)] = self.accel.capture(lambda b=b, mode=mode: self._step(b, mode), pool)
        self.accel.synchronize()
        if self.side_out is not None:
            self.readback.reserve_side(self.side_out)
        log.info("captured decode graphs for batch sizes %s, modes %s", self.buckets, list(self.modes))

    @property
    def captured(self) -> bool:
        return bool(self._graphs)

    # -- replay -------------------------------------------------------------------------------

    def bucket_for(self, n: int) -> int | None:
        """The smallest bucket holding ``n`` rows (None when ``n`` exceeds the largest)."""
        for b in self.buckets:
            if b >= n:
                return b
        return None

    def _fill_padding(self, start: int) -> None:
        h = self.staging.h
        h["input_ids"][start:] = 0
        h["token_index"][start:] = np.arange(self.rows + start, 2 * self.rows)
        h["positions"][start:] = 0
        if self.staged_positions:
            h["rope_positions"][start:] = 0
        for g, pad in self.pad_blocks.items():
            h[f"slot_mapping{g}"][start:] = pad * self._block_size()
            h[f"block_tables{g}"][start:] = pad
        h["state_slots"][start:] = self.pad_slot
        h["seq_lens"][start:] = 1
        h["temperature"][start:] = 0.0
        h["top_p"][start:] = 2.0
        h["min_p"][start:] = 0.0
        h["top_k"][start:] = self.vocab_size
        h["seeds"][start:] = 0
        h["steps"][start:] = 0

    def _block_size(self) -> int:
        return self.caches.block_size

    @torch.inference_mode()
    def time_replay(self, batch: int, mode: str = "greedy", iters: int = 20) -> float:
        """Median device milliseconds of one replay of bucket ``batch``'s graph with every row padding
        (scratch block and slot only), replays back to back: the step's device time without any
        host work in between (compare with the measured inter-token latency). With several rows this is
        a lower bound: every padding row reads and writes the same scratch state slot (in L2 after the
        first) over a one-token context, so a served step with distinct slots and long contexts takes
        longer on the device (BENCHMARKS.md compares the two).

        Raises:
            AnnaError: no graph for that bucket and mode.
        """
        replay = self.padded_replay(batch, mode)
        replay()  # warm
        times = []
        timer = self.accel.timer()
        for _ in range(iters):
            timer.start()
            replay()
            times.append(timer.stop())
        return sorted(times)[len(times) // 2]

    def padded_replay(self, batch: int, mode: str = "greedy") -> Callable[[], None]:
        """Stage a step whose rows are all padding (scratch block and slot only) for bucket ``batch``
        and return the replay of its graph (for timing and tracing the step's device work alone).

        Raises:
            AnnaError: no graph for that bucket and mode.
        """
        graph = self._graphs.get((batch, mode))
        if graph is None:
            raise AnnaError(f"no captured decode graph for bucket {batch} in mode {mode!r}")
        self.staging.next_buffer()
        self._fill_padding(0)
        self.staging.upload()
        return graph.replay

    def run(self, token_ids: Sequence[int], positions: Sequence[int],
            block_tables: Sequence[Sequence[Sequence[int]]], state_slots: Sequence[int], mode: str, floats: Sequence[Sequence[float]] | None = None,
            ints: Sequence[Sequence[int]] | None = None, prev_rows: Sequence[int] | None = None,
            rope_positions: Sequence[int] | None = None) -> PendingIds:
        """Stage one decode step of ``n`` sequences and replay its graph, without waiting for it.

        Args:
            token_ids, positions: ``[n]`` the new token and its position per sequence.
            block_tables: per attention group (the caches' order), per sequence its blocks (at most ``W`` each).
            state_slots: ``[n]`` recurrent-state slots.
            mode: ``"greedy"``, ``"sample"``, ``"sample_plain"``, ``"topk_greedy"`` or ``"topk_sample"``.
            floats, ints: per row sampling parameters from :func:`~anna_core.engine.sampler.param_rows`
                (needed for the sampling modes).
            prev_rows: per row, the row of the previous replay whose sampled id is this row's input
                token (the host does not know it yet), or ``-1`` to use ``token_ids[i]``.
            rope_positions: ``[n]`` the position the model sees per sequence (every row), when the graphs
                stage positions (``staged_positions``); None: ``positions``.

        Returns:
            The ``n`` sampled ids (and side outputs, ``side_outputs``), being copied to the host
            (:meth:`PendingIds.tolist` waits).

        Raises:
            AnnaError: not captured, ``n`` above the largest bucket, a block table wider than ``W``, or
                mode ``"logits"`` (use :meth:`run_logits`).
        """
        if mode not in ("greedy", "sample", "sample_plain", "topk_greedy", "topk_sample"):
            raise AnnaError(f"run() samples (mode 'greedy', 'sample', 'sample_plain', 'topk_greedy' or "
                            f"'topk_sample'), got {mode!r}; logits: run_logits(); candidates: run_topk()")
        n = len(token_ids)
        self._replay(token_ids, positions, block_tables, state_slots, mode, floats, ints, prev_rows, rope_positions)
        return self.readback.start(self.out[:n], self.side_out[:n] if self.side_outputs else None)

    def run_logits(self, token_ids: Sequence[int], positions: Sequence[int],
                   block_tables: Sequence[Sequence[Sequence[int]]], state_slots: Sequence[int],
                   rope_positions: Sequence[int] | None = None) -> torch.Tensor:
        """Stage one decode step of ``n`` sequences and replay the ``"logits"`` graph (forward and LM
        head, no sampling), without waiting for it.

        Args:
            token_ids, positions, block_tables, state_slots, rope_positions: as for :meth:`run` (input
                tokens known).

        Returns:
            ``[n, vocab]`` float32 logits on the device: a view of the graphs' output buffer, valid until
            the next replay in mode ``"logits"``.

        Raises:
            AnnaError: as for :meth:`run`.
        """
        n = len(token_ids)
        self._replay(token_ids, positions, block_tables, state_slots, "logits", rope_positions=rope_positions)
        return self.logits_out[:n]

    def run_topk(self, token_ids: Sequence[int], positions: Sequence[int],
                 block_tables: Sequence[Sequence[Sequence[int]]], state_slots: Sequence[int],
                 rope_positions: Sequence[int] | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """:meth:`run_logits` with the fused top-k head (mode ``"topk"``): the ``n`` rows' candidates.

        Returns:
            ``(values [n, topk] float32, indices [n, topk] int64, logsumexp [n] float32)`` on the device: views of
            the graphs' output buffers, valid until the next replay in mode ``"topk"``.

        Raises:
            AnnaError: as for :meth:`run` (no ``"topk"`` graph included).
        """
        n = len(token_ids)
        self._replay(token_ids, positions, block_tables, state_slots, "topk", rope_positions=rope_positions)
        return tuple(t[:n] for t in self.topk_out)

    def _replay(self, token_ids: Sequence[int], positions: Sequence[int],
                block_tables: Sequence[Sequence[Sequence[int]]], state_slots: Sequence[int], mode: str, floats: Sequence[Sequence[float]] | None = None,
                ints: Sequence[Sequence[int]] | None = None, prev_rows: Sequence[int] | None = None,
                rope_positions: Sequence[int] | None = None) -> None:
        """Stage the step's inputs, upload them and replay the graph of ``mode``."""
        n = len(token_ids)
        b = self.bucket_for(n)
        graph = self._graphs.get((b, mode)) if b is not None else None
        if graph is None:
            raise AnnaError(f"no captured decode graph for {n} sequences in mode {mode!r}")
        self.staging.next_buffer()
        h = self.staging.h
        bs = self._block_size()
        h["input_ids"][:n] = token_ids
        index = np.arange(self.rows, self.rows + n)
        if prev_rows is not None:
            prev = np.asarray(prev_rows, dtype=np.int64)
            index = np.where(prev >= 0, prev, index)
        h["token_index"][:n] = index
        h["positions"][:n] = positions
        if self.staged_positions:
            h["rope_positions"][:n] = positions if rope_positions is None else rope_positions
        h["state_slots"][:n] = state_slots
        h["seq_lens"][:n] = [p + 1 for p in positions]
        if len(block_tables) != len(self.groups):
            raise AnnaError(f"{len(block_tables)} block-table groups for {len(self.groups)} attention groups")
        for g, group_tables in zip(self.groups, block_tables):
            tables = h[f"block_tables{g}"]
            slot_map = h[f"slot_mapping{g}"]
            pad = self.pad_blocks[g]
            for i, (table, pos) in enumerate(zip(group_tables, positions)):
                if len(table) > self.width:
                    raise AnnaError(f"a block table of {len(table)} blocks exceeds the captured width {self.width}")
                tables[i, :len(table)] = table
                tables[i, len(table):] = pad
                slot_map[i] = table[pos // bs] * bs + pos % bs
        if mode in ("sample", "sample_plain"):
            f = np.asarray(floats, dtype=np.float32).reshape(n, 3)
            k = np.asarray(ints, dtype=np.int64).reshape(n, 3)
            h["temperature"][:n], h["top_p"][:n], h["min_p"][:n] = f[:, 0], f[:, 1], f[:, 2]
            h["top_k"][:n], h["seeds"][:n], h["steps"][:n] = k[:, 0], k[:, 1], k[:, 2]
        if n < b:
            self._fill_padding(n)
        self.staging.upload(rows=b)
        graph.replay()
