"""Runs one scheduled step: ForwardBatch on the device, forward, logits, sampling.

The ``.tolist()`` of the sampled ids is the step's only host sync; every index tensor is built on
the host and copied without blocking. After :meth:`ModelRunner.setup` with graphs enabled, a
decode-only step replays a captured graph (:mod:`anna_core.engine.cuda_graphs`): with the sampler
inside when every request's sampling fits it, else the forward and LM head only, sampled eagerly
(penalties, ``min_tokens``, logit bias, grammars, logprobs); prefill and mixed steps run eagerly.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import attrs
import torch

from anna_core.device import Accelerator, accelerator
from anna_core.engine.cache_allocator import scratch_block, scratch_slot, zero_slots
from anna_core.engine.checkpoint_plan import CheckpointTarget, SeqCheckpoints, build_checkpoints
from anna_core.engine.cuda_graphs import DecodeGraphs
from anna_core.engine.forward_batch import ForwardBatch
from anna_core.engine.graph_staging import PendingIds
from anna_core.engine.logits_processors import needs_processing
from anna_core.engine.prefill_graphs import PrefillGraphs, prefill_buckets, supports_padded_prefill
from anna_core.engine.request import PENDING
from anna_core.engine.sampler import Sampler, graph_safe, host_tensor, param_rows
from anna_core.engine.scheduler import SchedulerOutput
from anna_core.errors import AnnaError
from anna_core.layers.state_checkpoints import StateCheckpoints
from anna_core.model import ModelCaches

log = logging.getLogger("anna.engine")

COMPILE_MODES = ("none", "default", "max-autotune")
WARMUP_LONG_PREFILL = 1024
"""Tokens of the long warm-up prefill run at start-up on an accelerator."""


def _compile_mode(value: str) -> str:
    if value not in COMPILE_MODES:
        raise AnnaError(f"compile_mode must be one of {COMPILE_MODES}, got {value!r}")
    return value


@attrs.define
class RunnerConfig:
    """How the runner executes steps (independent of :class:`~anna_core.engine.config.EngineConfig`).

    Attributes:
        cuda_graph: capture decode steps as device graphs where the device supports them
            (CUDA; XPU with ``torch.xpu.XPUGraph``); ignored on CPU. ``--no-cuda-graph`` sets False.
        compile_mode: ``torch.compile`` the forward + LM head before capture: ``"none"``,
            ``"default"`` or ``"max-autotune"`` (run without compile-side CUDA graphs, since the
            runner captures its own).
        warmup: run one prefill + decode at start-up so the first request pays no compile or
            autotune time.

    Raises:
        AnnaError: unknown ``compile_mode``.
    """

    cuda_graph: bool = True
    compile_mode: str = attrs.field(default="none", converter=_compile_mode)
    warmup: bool = True


class ModelRunner:
    """Owns the model, its caches and the sampler.

    Args:
        model: a :class:`~anna_core.model.CausalLM` module.
        caches: its allocated caches.
        device: the model's device.
        sampler: defaults to :class:`Sampler`.
    """

    def __init__(self, model: Any, caches: ModelCaches, device: torch.device, sampler: Sampler | None = None,
                 accel: Accelerator | None = None):
        self.model = model
        self.caches = caches
        self.device = device
        self.sampler = sampler or Sampler()
        self.accel = accel or accelerator(device)
        self.graphs: DecodeGraphs | None = None
        self.prefill_graphs: PrefillGraphs | None = None
        self.profile_scopes = False
        self.num_graph_steps = 0
        self.num_prefill_graph_steps = 0
        self.num_eager_steps = 0
        self.logits_processors: Any = None  # LogitsProcessors: logit_bias, grammars, logprobs
        # where snapshots taken inside a prefill pass go (set by the engine when the scheduler plans them)
        self.checkpoint_target: CheckpointTarget | None = None

    def setup(self, config: RunnerConfig, *, max_model_len: int, max_num_seqs: int,
              max_prefill_tokens: int | None = None) -> None:
        """Warm up and capture the prefill graphs (:mod:`anna_core.engine.prefill_graphs`, for prompts of
        up to ``max_prefill_tokens``, default ``max_model_len``, where the model supports them) and the
        decode graphs (where the device and ``config`` allow).

        A failed capture (e.g. a kernel that synchronizes with the host) is logged and leaves those
        steps eager: serving continues, only slower. When ``torch.compile`` of the step is what fails
        (dynamo cannot trace every kernel plugin's launcher), the uncompiled step is captured instead.
        """
        self.graphs = None
        self.prefill_graphs = None
        if config.warmup:
            self.warmup(max_model_len)
        if not (config.cuda_graph and self.accel.graphs):
            return
        self._capture_prefill(min(max_model_len - 1, max_prefill_tokens or max_model_len),
                              -(-max_model_len // self.caches.block_size))
        vocab = int(getattr(self.model, "vocab_size", 0) or self._vocab_size())
        compile_fn = None
        if config.compile_mode != "none":
            mode = "max-autotune-no-cudagraphs" if config.compile_mode == "max-autotune" else "default"

            def compile_fn(fn):
                return torch.compile(fn, mode=mode, dynamic=False)

        width = -(-max_model_len // self.caches.block_size)

        def capture(fn):
            graphs = DecodeGraphs(self.model, self.caches, self.accel, max_batch=max_num_seqs,
                                  max_blocks_per_seq=width, vocab_size=vocab, compile_fn=fn)
            graphs.capture()
            return graphs

        try:
            self.graphs = capture(compile_fn)
            return
        except Exception as exc:  # noqa: BLE001 - keep serving rather than not at all
            if compile_fn is None:
                log.warning("decode graph capture failed, running eagerly: %s: %s", type(exc).__name__, str(exc))
                return
            # e.g. dynamo cannot trace a kernel plugin's launcher: the graphs still pay without compile
            log.warning("decode graph capture with torch.compile (mode %s) failed, capturing the uncompiled step: "
                        "%s: %s", config.compile_mode, type(exc).__name__, str(exc))  # str: frees the attempt
        try:
            self.graphs = capture(None)
        except Exception as exc:  # noqa: BLE001
            log.warning("decode graph capture failed, running eagerly: %s: %s", type(exc).__name__, str(exc))

    def _capture_prefill(self, max_tokens: int, width: int) -> None:
        """Capture the prefill graphs of prompts up to ``max_tokens`` with block tables of up to ``width``
        blocks (none when the model does not support padded prefills or no bucket fits); a failure is
        logged and leaves prefills eager."""
        buckets = prefill_buckets(max_tokens)
        if not buckets or not supports_padded_prefill(self.model):
            return
        try:
            graphs = PrefillGraphs(self.model, self.caches, self.accel, buckets=buckets, max_blocks_per_seq=width,
                                   checkpoints=self.checkpoint_target)
            graphs.capture()
            self.prefill_graphs = graphs
        except Exception as exc:  # noqa: BLE001 - keep serving rather than not at all
            log.warning("prefill graph capture failed, prefills run eagerly: %s: %s", type(exc).__name__, str(exc))

    def _prefill_graph_logits(self, out: SchedulerOutput) -> torch.Tensor | None:
        """Replay the prefill graph for ``out`` when it is one fresh prompt, whole in this step, that a
        bucket holds; returns its last token's ``[1, vocab]`` logits, or None (the step runs eagerly)."""
        graphs = self.prefill_graphs
        if graphs is None or out.is_decode or len(out.seqs) != 1:
            return None
        seq = out.seqs[0]
        if not (seq.is_fresh and seq.samples) or graphs.bucket_for(seq.num_new_tokens) is None:
            return None
        if len(seq.block_table) > graphs.width or (seq.checkpoints and graphs.checkpoints is None):
            return None
        if self.caches.conv_states or self.caches.recurrent_states:
            zero_slots(self.caches, host_tensor([seq.state_slot], torch.int64, self.device))
        logits = graphs.run(seq.token_ids, seq.block_table, seq.state_slot, [(p, i) for p, i, _ in seq.checkpoints])
        self.num_prefill_graph_steps += 1
        return logits

    def _vocab_size(self) -> int:
        cfg = getattr(self.model, "config", None)
        if getattr(cfg, "vocab_size", None):
            return int(cfg.vocab_size)
        hidden = getattr(cfg, "hidden_size", None)
        if hidden is None:
            raise AnnaError("the model has no vocab_size; cannot size the captured sampler")
        with torch.inference_mode():
            return int(self.model.compute_logits(torch.zeros(1, hidden, device=self.device,
                                                            dtype=self._dtype())).shape[-1])

    def _dtype(self) -> torch.dtype:
        for p in self.model.parameters():
            if p.is_floating_point():
                return p.dtype
        return torch.float32

    @torch.inference_mode()
    def warmup(self, max_model_len: int) -> None:
        """Prefills and one decode on the scratch block and slot (compiles and autotunes kernels
        before the first request; touches no sequence's cache).

        On an accelerator, long prefills (up to :data:`WARMUP_LONG_PREFILL` tokens) and prefill
        chunks over a long context run first, so the kernel variants of long prompts and of chunked
        prefills are compiled and tuned at start-up rather than inside the first such request; then
        a short prefill and a decode step follow; then a prefill of two prompts in one batch.
        """
        bs = self.caches.block_size
        n = max(1, min(bs, max_model_len - 1))
        slot = scratch_slot(self.caches)
        dev = self.device
        slots = torch.tensor([slot], dtype=torch.int64, device=dev)
        plan = [(0, n), (n, 1)]
        long_n = min(WARMUP_LONG_PREFILL, max_model_len - 1)
        if dev.type != "cpu" and long_n > 8 * n:
            # long prompts (attention without key splits) and prefill chunks over a long context
            # (with splits), each at a length that is a multiple of 16 and one that is not: Triton
            # specialises integer arguments on divisibility by 16, so these cover every variant
            odd = long_n - 5 - (long_n - 5) % 16 + 13
            plan[:0] = [(0, long_n), (0, odd), (long_n - 4 * n, 4 * n), (long_n - 4 * n + 3, 4 * n - 3)]
        recurrent = bool(self.caches.conv_states or self.caches.recurrent_states)
        for start, count in plan:
            if start == 0 and recurrent:
                zero_slots(self.caches, slots)
            self._forward_on_scratch([(start, count)], slots)
        if dev.type != "cpu" and long_n > 8 * n:
            # two prompts in one batch take kernel variants one prompt does not (fla's chunked rule compiles
            # its variable-length form separately); state slot 0 is free during set-up, zeroed after
            two = torch.tensor([slot, 0], dtype=torch.int64, device=dev)
            self._forward_on_scratch([(0, long_n // 2), (0, long_n // 2 - 3)], two, zero_states=recurrent)
        self.accel.synchronize()

    def _forward_on_scratch(self, seqs: list[tuple[int, int]], slots: torch.Tensor, zero_states: bool = False) -> None:
        """Run the model and LM head on sequences ``(start, count)`` whose K/V all go to the scratch block,
        their states in ``slots`` (``[len(seqs)]`` int64; zeroed before and after with ``zero_states``)."""
        bs, dev, blk = self.caches.block_size, self.device, scratch_block(self.caches)
        if zero_states:
            zero_slots(self.caches, slots)
        pos = [p for start, count in seqs for p in range(start, start + count)]
        ctx = [start + count for start, count in seqs]
        cu = [0]
        for _, count in seqs:
            cu.append(cu[-1] + count)
        t = lambda v, dt: torch.tensor(v, dtype=dt, device=dev)  # noqa: E731
        batch = ForwardBatch(
            input_ids=torch.zeros(len(pos), dtype=torch.int64, device=dev), positions=t(pos, torch.int64),
            cu_seqlens=t(cu, torch.int32), seq_lens=t(ctx, torch.int32),
            block_tables=t([[blk] * -(-max(ctx) // bs)] * len(seqs), torch.int32),
            slot_mapping=t([blk * bs + p % bs for p in pos], torch.int64), state_slots=slots,
            logits_indices=t([c - 1 for c in cu[1:]], torch.int64), query_lens=[count for _, count in seqs],
            context_lens=ctx, is_decode=all(count == 1 for _, count in seqs),
        )
        hidden = self.model(batch, self.caches)
        self.model.compute_logits(hidden[batch.logits_indices]).argmax(-1)
        if zero_states:
            zero_slots(self.caches, slots)

    def _scope(self, name: str):
        """A profiler range around a step component (only while :attr:`profile_scopes` is set); on
        an accelerator the device is synchronized at both ends so its kernels fall inside the range
        (see :mod:`anna_core.bench.profile`)."""
        if not self.profile_scopes:
            return contextlib.nullcontext()
        return self._synced_range(name)

    @contextlib.contextmanager
    def _synced_range(self, name: str):
        self.accel.synchronize()
        with torch.profiler.record_function(f"anna::{name}"):
            yield
            self.accel.synchronize()

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
            checkpoints=self._checkpoints(out, cu_seqlens) if any(s.checkpoints for s in out.seqs) else None,
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

    def _checkpoints(self, out: SchedulerOutput, cu_seqlens: list[int]) -> StateCheckpoints:
        """The in-pass snapshots of ``out``'s sequences (rows from ``cu_seqlens``).

        Raises:
            AnnaError: the scheduler planned them but the engine set no :attr:`checkpoint_target`.
        """
        target = self.checkpoint_target
        if target is None:
            raise AnnaError("a step carries in-pass state snapshots but the runner has no snapshot store")
        seqs = [SeqCheckpoints(row=cu_seqlens[i], num_rows=s.num_new_tokens, slot=s.state_slot,
                               points=[(p - s.start, idx) for p, idx, _ in s.checkpoints])
                for i, s in enumerate(out.seqs)]
        return build_checkpoints(seqs, target.conv_width, target.conv_store, target.recurrent_store, self.device)

    @torch.inference_mode()
    def execute(self, out: SchedulerOutput) -> dict[str, int]:
        """Run the step; returns request id -> sampled token for every sequence that samples.

        A decode step replays a captured graph where one fits: the graph with the sampler inside for the
        requests :func:`~anna_core.engine.sampler.graph_safe` accepts, else the ``"logits"`` graph
        (forward and LM head) followed by the eager sampler (penalties, ``min_tokens``, logit bias,
        grammars, logprobs); otherwise the step runs eagerly.

        Raises:
            AnnaError: a decode input token is still :data:`~anna_core.engine.request.PENDING` (the
                engine reads the step in flight back before it calls this).
        """
        if out.is_decode and any(s.token_ids[0] == PENDING for s in out.seqs):
            raise AnnaError("a decode input token is still pending: read the step in flight back first")
        if self.graphs is not None and out.is_decode:
            pending = self.launch_graph(out)
            if pending is not None:
                return dict(zip([s.request_id for s in out.seqs], pending.tolist()))  # the step's one host sync
            logits = self._graph_logits(out)
            if logits is not None:
                return self._sample(logits, [s.request for s in out.seqs])
        logits = self._prefill_graph_logits(out)
        if logits is not None:
            return self._sample(logits, [out.seqs[0].request])
        self.num_eager_steps += 1
        fresh = [s.state_slot for s in out.seqs if s.is_fresh]
        if fresh and (self.caches.conv_states or self.caches.recurrent_states):
            zero_slots(self.caches, host_tensor(fresh, torch.int64, self.device))
        batch = self.build_batch(out)
        hidden = self.model(batch, self.caches)  # [T, hidden]
        samplers = [s.request for s in out.seqs if s.samples]
        if not samplers:
            return {}
        with self._scope("lm_head"):
            logits = self.model.compute_logits(hidden[batch.logits_indices])  # [N, vocab]
        return self._sample(logits, samplers)

    def _sample(self, logits: torch.Tensor, samplers: list) -> dict[str, int]:
        """The eager sampler (with the logits processors where a request needs them) on ``logits``
        ``[N, vocab]`` float32, one row per request of ``samplers``; request id -> sampled token."""
        with self._scope("sampling"):
            if self.logits_processors is not None and any(needs_processing(r.params) for r in samplers):
                ids = self.logits_processors.sample(logits, samplers, self.sampler)  # one host sync inside
            else:
                ids = self.sampler(logits, samplers).tolist()  # the step's one host sync
        return {r.request_id: t for r, t in zip(samplers, ids)}

    def _graph_fits(self, out: SchedulerOutput, mode: str | None = None) -> bool:
        """Whether ``out`` is a decode step that the captured graphs (of ``mode``, when given) can run: a
        bucket holds its batch, every block table fits the captured width and every sequence samples."""
        graphs = self.graphs
        if graphs is None or not out.is_decode or not out.seqs or (mode is not None and mode not in graphs.modes):
            return False
        if graphs.bucket_for(len(out.seqs)) is None:
            return False
        return not any(len(s.block_table) > graphs.width or not s.samples for s in out.seqs)

    def _graph_logits(self, out: SchedulerOutput) -> torch.Tensor | None:
        """Replay the ``"logits"`` graph for decode step ``out`` (input tokens known) and return its
        ``[n, vocab]`` logits, or None when no captured graph fits the step."""
        if not self._graph_fits(out, "logits"):
            return None
        logits = self.graphs.run_logits([s.token_ids[0] for s in out.seqs], [s.start for s in out.seqs],
                                        [s.block_table for s in out.seqs], [s.state_slot for s in out.seqs])
        self.num_graph_steps += 1
        return logits

    def can_launch_graph(self, out: SchedulerOutput) -> bool:
        """Whether ``out`` can replay a captured decode graph with its sampler inside (see
        :meth:`launch_graph`)."""
        if not self._graph_fits(out):
            return False
        if not graph_safe([s.request for s in out.seqs]):
            return False
        return not getattr(self.sampler, "wanted", None)  # a sampler wrapper wants this step's logits rows

    @torch.inference_mode()
    def launch_graph(self, out: SchedulerOutput, prev_rows: dict[str, int] | None = None) -> PendingIds | None:
        """Stage and replay the captured decode graph without waiting for it; None when this step
        needs the eager path.

        Args:
            out: a decode step.
            prev_rows: request id -> row of the previous (launched, not yet read back) graph step
                whose sampled id is that sequence's input token; sequences whose token is
                :data:`~anna_core.engine.request.PENDING` must be listed.

        Returns:
            The sampled ids in ``out.seqs`` order, being copied to the host.

        Raises:
            AnnaError: a pending input token with no row in ``prev_rows``.
        """
        if not self.can_launch_graph(out):
            return None
        graphs = self.graphs
        requests = [s.request for s in out.seqs]
        if all(r.params.temperature == 0.0 for r in requests):
            mode, floats, ints = "greedy", None, None
        else:
            mode = "sample"
            floats, ints = param_rows(requests, graphs.vocab_size)
        if mode not in graphs.modes:  # graphs captured without it: the caller takes another path
            return None
        tokens = [s.token_ids[0] for s in out.seqs]
        rows = None
        if PENDING in tokens:
            prev_rows = prev_rows or {}
            rows = [prev_rows.get(s.request_id, -1) if t == PENDING else -1 for s, t in zip(out.seqs, tokens)]
            if any(t == PENDING and r < 0 for t, r in zip(tokens, rows)):
                raise AnnaError("a decode input token is pending but no launched step produces it")
        pending = graphs.run(tokens, [s.start for s in out.seqs], [s.block_table for s in out.seqs],
                             [s.state_slot for s in out.seqs], mode, floats, ints, prev_rows=rows)
        self.num_graph_steps += 1
        return pending
