"""Runs one scheduled step along the path :meth:`ModelRunner.plan` picks: forward, logits, sampling.

The ``.tolist()`` of the sampled ids is the step's only host sync; every index tensor is built on
the host and copied without blocking. After :meth:`ModelRunner.setup` with graphs enabled, a
decode-only step replays a captured graph (:mod:`anna_core.engine.cuda_graphs`): with the sampler
inside when every request's sampling fits it, else the forward and LM head only, sampled eagerly
(penalties, ``min_tokens``, logit bias, grammars, logprobs); a fresh prompt replays a prefill graph of its
length bucket, and a step mixing decodes and prompts runs its parts apart (:meth:`ModelRunner.split`).
Everything else runs eagerly. Its collaborators hold the other concepts: the settings
(:mod:`anna_core.engine.runner_config`), the start-up and graph capture (:mod:`anna_core.engine.runner_setup`), the
eager pass's inputs (:mod:`anna_core.engine.batch_builder`) and the sampling hand-off
(:mod:`anna_core.engine.step_sampling`).
"""

from __future__ import annotations

import contextlib
from typing import Any

import attrs
import torch

from anna_core.device import Accelerator, accelerator
from anna_core.engine import prompt_logprobs
from anna_core.engine.batch_builder import BatchBuilder
from anna_core.engine.cache_allocator import has_state, zero_slots
from anna_core.engine.checkpoint_plan import CheckpointTarget
from anna_core.engine.cuda_graphs import DecodeGraphs
from anna_core.engine.encoder_outputs import EncoderOutputs
from anna_core.engine.forward_batch import ForwardBatch, PromptStart
from anna_core.engine.graph_staging import PendingIds
from anna_core.engine.logits_processors import LogitsProcessors
from anna_core.engine.prefill_graphs import PrefillGraphs, prefill_buckets
from anna_core.engine.request import PENDING
from anna_core.engine.runner_config import COMPILE_MODES, RunnerConfig  # noqa: F401 - re-exported
from anna_core.engine.runner_setup import NOT_SET_UP, RunnerSetup
from anna_core.engine.sampler import Sampler, graph_safe, host_tensor, param_rows
from anna_core.engine.sched_output import ModelRunnerOutput, StepPath
from anna_core.engine.scheduler import SchedulerOutput
from anna_core.engine.step_sampling import decode_sample_mode, kept_logits, sample_rows, wants_logits
from anna_core.engine.topk_head import FUSED_K, fits_topk_head, sample_candidates
from anna_core.errors import AnnaError
from anna_core.model import CausalLM, ModelCaches


class ModelRunner:
    """Owns the model, its caches and the sampler.

    Args:
        model: a :class:`~anna_core.model.CausalLM` module.
        caches: its allocated caches.
        device: the model's device.
        sampler: defaults to :class:`Sampler`.
        logits_processors: logit bias, grammars and logprobs for the requests that need them, or None.
        checkpoint_target: where snapshots taken inside a prefill pass go (when the scheduler plans them).
        accel: device services (default: :func:`anna_core.device.accelerator` of ``device``).
    """

    def __init__(self, model: CausalLM, caches: ModelCaches, device: torch.device, *, sampler: Sampler | None = None,
                 logits_processors: LogitsProcessors | None = None,
                 checkpoint_target: CheckpointTarget | None = None, accel: Accelerator | None = None):
        self.model = model
        self.caches = caches
        self.device = device
        self.sampler = sampler or Sampler()
        self.accel = accel or accelerator(device)
        self.logits_processors = logits_processors
        self.checkpoint_target = checkpoint_target
        self.groups = [g for g, _ in caches.attention_caches]  # attention groups, in spec order
        caps = model.capabilities
        self.position_rows = caps.position_rows
        # positions that may differ from the cache index (media, M-RoPE) are built per token, and staged
        # separately into the graphs
        self.own_positions = bool(caps.modalities) or caps.position_rows > 1
        self.encoder = EncoderOutputs(model, device, self.accel) if caps.modalities else None
        self.batches = BatchBuilder(caches, device, position_rows=caps.position_rows, own_positions=self.own_positions,
                                    encoder=self.encoder, side_outputs=caps.side_outputs,
                                    checkpoint_target=checkpoint_target)
        self.graphs: DecodeGraphs | None = None
        self.prefill_graphs: PrefillGraphs | None = None
        self.profile_scopes = False
        self.num_graph_steps = 0
        # steps by path; a split step also counts its parts: its decode graph in num_graph_steps, each prompt's
        # replay in num_prefill_graph_steps, or its prompts' eager pass in num_eager_steps
        self.num_prefill_graph_steps = 0
        self.num_split_steps = 0
        self.num_eager_steps = 0
        # decode graph steps launched without waiting (asynchronous scheduling: read back by the engine's next call)
        self.num_launched_ahead = 0
        self.max_prefill_replays = 0  # set by setup() (graphs only exist after it)
        self.fused_topk_head = "off"  # RunnerConfig.fused_topk_head (its default), set by setup()
        # sampling steps (or parts of split steps) by LM head: the fused top-k head, or the full logits
        self.num_topk_head_steps = 0
        self.num_full_head_steps = 0
        self.startup: dict[str, float] = {}  # seconds per set-up phase (warmup_s, prefill_graphs_s, decode_graphs_s)
        # why each kind of graph was not captured (None once captured); graph_report() shows it
        self._no_graphs: dict[str, str | None] = dict.fromkeys(("decode", "prefill"), NOT_SET_UP)

    def setup(self, config: RunnerConfig, *, max_model_len: int, max_num_seqs: int,
              max_prefill_tokens: int | None = None) -> None:
        """Warm up and capture the prefill graphs (:mod:`anna_core.engine.prefill_graphs`, for prompts of
        up to ``max_prefill_tokens``, default ``max_model_len``, where the model supports them) and the
        decode graphs (where the device and ``config`` allow): :class:`~anna_core.engine.runner_setup.RunnerSetup`.

        A failed capture (e.g. a kernel that synchronizes with the host) is logged and leaves those
        steps eager: serving continues, only slower. When ``torch.compile`` of the step is what fails
        (dynamo cannot trace every kernel plugin's launcher), the uncompiled step is captured instead.
        The seconds each phase took are logged and kept in :attr:`startup`.
        """
        self.graphs = None
        self.prefill_graphs = None
        self.startup = {}
        self.max_prefill_replays = config.max_prefill_replays
        self.fused_topk_head = config.fused_topk_head
        # the graph factories are this module's names (tests patch them here)
        setup = RunnerSetup(self.model, self.caches, self.accel, self.device, position_rows=self.position_rows,
                            own_positions=self.own_positions, checkpoint_target=self.checkpoint_target,
                            decode_graphs=DecodeGraphs, buckets=prefill_buckets)
        done = setup.run(config, max_model_len=max_model_len, max_num_seqs=max_num_seqs,
                         max_prefill_tokens=max_prefill_tokens, topk_head=self.topk_head_active)
        self.graphs, self.prefill_graphs = done.decode, done.prefill
        self.startup, self._no_graphs = done.startup, done.why_not

    def graph_report(self) -> dict[str, dict[str, Any]]:
        """Which steps replay captured graphs (``/healthz``, ``engine.graphs``), family-neutral.

        Returns:
            ``{"decode": {"captured": bool, "batch_sizes": [int], "modes": [str], "why_not": str | None},
            "prefill": {"model_supports": bool, "captured": bool, "prompt_lengths": [int], "why_not": str |
            None}}``: ``batch_sizes`` / ``prompt_lengths`` are the captured buckets (empty when not
            captured); ``model_supports`` is the model's ``padded_prefill`` capability (what prefill graphs
            need from a model; decode graphs need no capability); ``why_not`` says why a kind was not
            captured: :meth:`setup` has not run, graphs are off, the device cannot capture them, the model
            lacks the capability, no bucket fits, or the capture failed (with the error).
        """
        dg, pg = self.graphs, self.prefill_graphs
        return {
            "decode": {"captured": dg is not None, "batch_sizes": list(dg.buckets) if dg is not None else [],
                       "modes": list(dg.modes) if dg is not None else [], "why_not": self._no_graphs["decode"]},
            "prefill": {"model_supports": self.model.capabilities.padded_prefill, "captured": pg is not None,
                        "prompt_lengths": list(pg.buckets) if pg is not None else [],
                        "why_not": self._no_graphs["prefill"]},
        }

    @property
    def topk_head_active(self) -> bool:
        """Whether steps may take the fused top-k LM head: the model declares ``topk_head`` and
        ``fused_topk_head`` is ``"on"``, or ``"auto"`` on an accelerator; never for a vocabulary smaller than
        the head's ``FUSED_K`` candidates (tiny test models: the full head serves them)."""
        mode = self.fused_topk_head
        return (mode != "off" and self.model.capabilities.topk_head and self.model.vocab_size >= FUSED_K
                and (mode == "on" or self.device.type != "cpu"))

    def head_report(self) -> dict[str, Any]:
        """The LM head's path (``/healthz``' ``lm_head_path``, the bench report): ``{"fused_topk_head": mode,
        "model_supports": bool, "active": bool, "k": 64, "topk_steps": int, "full_steps": int}``: the sampling
        steps (each part of a split step counted) that took the fused top-k head and the full logits."""
        return {"fused_topk_head": self.fused_topk_head, "model_supports": self.model.capabilities.topk_head,
                "active": self.topk_head_active, "k": FUSED_K, "topk_steps": self.num_topk_head_steps,
                "full_steps": self.num_full_head_steps}

    def takes_topk_head(self, seqs: list) -> bool:
        """Whether the sampling sequences ``seqs`` of a step take the fused top-k head: it is active, every
        request fits it (:func:`~anna_core.engine.topk_head.fits_topk_head`) and no row's logits are kept."""
        return (self.topk_head_active and fits_topk_head([s.request for s in seqs])
                and not any(wants_logits(s) for s in seqs))

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
        """Flatten the scheduled sequences into a :class:`ForwardBatch` on the device
        (:meth:`~anna_core.engine.batch_builder.BatchBuilder.build`)."""
        return self.batches.build(out)

    # -- the step ----------------------------------------------------------------------------

    def plan(self, out: SchedulerOutput) -> StepPath:
        """How :meth:`execute` runs ``out`` (the one place the graph-or-eager choice is made).

        A decode step replays a captured decode graph when a bucket holds its batch and every table fits
        the captured width: with the sampler inside when every request's sampling fits it
        (:func:`~anna_core.engine.sampler.graph_safe`) and no row's logits must be returned, else the
        logits graph. A fresh prompt alone in its step, whole, that a bucket holds, replays its prefill
        graph. A step of decodes that a decode graph holds and prompt chunks, or of several fresh prompts
        that each fit a prefill graph, is split (:meth:`split`): the decodes replay their graph and the
        prompts replay one prefill graph each (at most ``max_prefill_replays`` of them) or share one eager
        pass. Everything else runs eagerly.
        """
        seqs = out.seqs
        if not seqs:
            return StepPath.EAGER
        if out.is_decode:
            path = self._decode_path(out)
            if path is not None:
                return path
        elif len(seqs) == 1 and self._prefill_graph_fits(seqs[0]):
            return StepPath.PREFILL_GRAPH
        return StepPath.SPLIT if self.split(out) is not None else StepPath.EAGER

    def _decode_path(self, out: SchedulerOutput) -> StepPath | None:
        """The decode graph path of a decode-only ``out``, or None when no captured decode graph runs it."""
        graphs = self.graphs
        if graphs is None or not self._fits_decode(out) or self._prompt_decodes(out):
            return None
        requests = [s.request for s in out.seqs]
        mode = self._sample_mode(requests, out.seqs)
        if graph_safe(requests) and mode in graphs.modes and not any(wants_logits(s) for s in out.seqs):
            return StepPath.DECODE_GRAPH
        if "logits" in graphs.modes:
            return StepPath.DECODE_LOGITS_GRAPH
        return None

    def _sample_mode(self, requests: list, seqs: list) -> str:
        """The captured sampler of a decode step: with the fused top-k head (when captured and the step takes it)
        ``"topk_greedy"`` (every row greedy) or ``"topk_sample"``; else ``"greedy"``, ``"sample_plain"`` (no row
        filters its distribution, when captured) or ``"sample"``."""
        graphs = self.graphs
        return decode_sample_mode(requests, graphs.modes, graphs.vocab_size, topk_head=self.takes_topk_head(seqs))

    def _prefill_graph_fits(self, seq) -> bool:
        """Whether ``seq``, a fresh prompt computed whole this step, replays a captured prefill graph (prompt tokens
        alone for a model that declares ``recompute_holds_last``: a generated token's input is not its id's)."""
        pg = self.prefill_graphs
        return (pg is not None and seq.is_fresh and seq.samples and pg.bucket_for(seq.num_new_tokens) is not None
                and all(len(seq.block_tables[g]) <= pg.width for g in self.groups)
                and (not seq.checkpoints or pg.checkpoints is not None) and (not seq.media or pg.media)
                and (not self.model.capabilities.recompute_holds_last
                     or seq.context_len <= seq.request.num_prompt_tokens)
                and not prompt_logprobs.rows_wanted(seq))  # (a prefill graph returns the last row's logits only)

    def split(self, out: SchedulerOutput) -> tuple[SchedulerOutput | None, SchedulerOutput, bool] | None:
        """How a step of decodes and prompt chunks (or of several prompts) runs without one eager pass over
        all of it: ``(decodes, prompts, replay)``, or None when it does not split.

        ``decodes`` (the one-token sequences, or None when there are none) must run as a decode graph; the
        ``prompts`` replay their prefill graphs one by one when ``replay`` (every one fits a graph and there
        are at most ``max_prefill_replays``), else they share one eager pass. A step of prompts alone splits
        only when they replay. Both parts are :class:`SchedulerOutput` views of ``out``'s sequences, in
        ``out``'s order.
        """
        if self.graphs is None and self.prefill_graphs is None:
            return None
        one = [s for s in out.seqs if s.num_new_tokens == 1 and s.start > 0]
        rest = [s for s in out.seqs if not (s.num_new_tokens == 1 and s.start > 0)]
        if not rest:
            return None
        replay = len(rest) <= self.max_prefill_replays and all(self._prefill_graph_fits(s) for s in rest)
        decodes = attrs.evolve(out, seqs=one) if one else None
        if decodes is not None and self._decode_path(decodes) is None:
            return None  # the decodes would be eager anyway: one eager pass computes everything
        if decodes is None and not replay:
            return None
        return decodes, attrs.evolve(out, seqs=rest), replay

    def _prompt_decodes(self, out: SchedulerOutput) -> bool:
        """Whether a one-token step computes a prompt token of a request with media or its own positions
        (its rows may differ, or be a placeholder): such a step runs eagerly. (A prompt row whose logprobs must be
        recorded never rides a decode graph either: it samples nothing, and a decode graph takes sampling rows
        only, :meth:`_fits_decode`.)"""
        return self.own_positions and any(s.request.multimodal is not None and s.start < s.request.num_prompt_tokens
                                          for s in out.seqs)

    def _fits_decode(self, out: SchedulerOutput) -> bool:
        graphs = self.graphs
        if graphs.bucket_for(len(out.seqs)) is None:
            return False
        return all(s.samples and all(len(s.block_tables[g]) <= graphs.width for g in self.groups) for s in out.seqs)

    @torch.inference_mode()
    def execute(self, out: SchedulerOutput, *, prev_rows: dict[str, int] | None = None, wait: bool = True,
                path: StepPath | None = None) -> ModelRunnerOutput:
        """Run the step along :meth:`plan`'s path; with a model that declares ``side_outputs``, the result carries
        each sampling sequence's side output (``ModelRunnerOutput.side_outputs``, or the ``pending`` ids').

        Args:
            out: the step.
            prev_rows: request id -> row of the previous (launched, not yet read back) decode graph step
                whose sampled id is that sequence's input token; every sequence whose token is
                :data:`~anna_core.engine.request.PENDING` must be listed (decode graph path only).
            wait: read the sampled ids back now; with False a decode graph step returns them as
                ``pending`` (other paths always wait).
            path: :meth:`plan`'s answer for ``out`` when the caller asked already (default: asked here).

        Raises:
            AnnaError: a pending input token with no row in ``prev_rows``, or on a path other than the
                decode graph; a prompt the model's ``start_prompts`` refuses (``prompt_state``).
        """
        path = self.plan(out) if path is None else path
        if self.encoder is not None:
            with self._scope("encoder"):
                self.encoder.encode(out.encoder_inputs)
        pending_input = any(PENDING in s.token_ids for s in out.seqs)
        if pending_input and path is not StepPath.DECODE_GRAPH:
            raise AnnaError("a decode input token is still pending: read the step in flight back first")
        if self.model.capabilities.prompt_state:  # before any path's forward pass (ModelCapabilities.prompt_state)
            starts = [PromptStart(s.state_slot, s.request.multimodal) for s in out.seqs if s.is_fresh]
            if starts:
                self.model.start_prompts(starts)
        if path is StepPath.DECODE_GRAPH:
            ids = self._launch_decode(out, prev_rows)
            if not wait:
                self.num_launched_ahead += 1
                return ModelRunnerOutput(path, pending=ids)
            rids = [s.request_id for s in out.seqs]
            side = ids.side_outputs()
            return ModelRunnerOutput(path, sampled=dict(zip(rids, ids.tolist())),
                                     side_outputs=dict(zip(rids, side)) if side is not None else {})
        if path is StepPath.DECODE_LOGITS_GRAPH:
            result = self._run_logits_graph(out, path)
        elif path is StepPath.PREFILL_GRAPH:
            seq = out.seqs[0]
            if has_state(self.caches):
                zero_slots(self.caches, host_tensor([seq.state_slot], torch.int64, self.device))
            logits = self._replay_prefill(seq)
            self.num_prefill_graph_steps += 1
            result = self._sample(path, logits, out.seqs)
        elif path is StepPath.SPLIT:
            result = self._run_split(out)
        else:
            self.num_eager_steps += 1
            result = self._run_eager(out, path)
        if self.model.capabilities.side_outputs:
            samplers = [s for s in out.seqs if s.samples]
            result.side_outputs = self.side_outputs_of([s.request_id for s in samplers],
                                                       [s.state_slot for s in samplers])
        return result

    def side_outputs_of(self, request_ids: list[str], state_slots: list[int]) -> dict[str, Any]:
        """Request id -> the host copy of what the model's last step left in its state slot
        (``model.gather_side_outputs``, one row per request; a model that declares ``side_outputs``): after a step
        that waited (one more host sync, behind the sampling's), and for prompt-cache hits."""
        if not request_ids:
            return {}
        rows = self.model.gather_side_outputs(host_tensor(state_slots, torch.int64, self.device))
        return dict(zip(request_ids, rows.to("cpu", copy=True).unbind(0)))

    def _run_logits_graph(self, out: SchedulerOutput, path: StepPath) -> ModelRunnerOutput:
        """The decode step ``out`` through the captured logits graph (the candidates graph when the step takes the
        fused top-k head, e.g. for logprobs), sampled eagerly."""
        self.num_graph_steps += 1
        if "topk" in self.graphs.modes and self.takes_topk_head(out.seqs):
            values, indices, lse = self.graphs.run_topk(
                [s.token_ids[0] for s in out.seqs], [s.start for s in out.seqs], self.batches.tables_by_group(out),
                [s.state_slot for s in out.seqs], rope_positions=self.batches.decode_positions(out))
            return self._sample_topk(path, values, indices, lse, out.seqs)
        logits = self.graphs.run_logits([s.token_ids[0] for s in out.seqs], [s.start for s in out.seqs],
                                        self.batches.tables_by_group(out), [s.state_slot for s in out.seqs],
                                        rope_positions=self.batches.decode_positions(out))
        return self._sample(path, logits, out.seqs)

    def _run_eager(self, out: SchedulerOutput, path: StepPath) -> ModelRunnerOutput:
        """The model called eagerly on all of ``out``'s sequences; samples those that sample."""
        fresh = [s.state_slot for s in out.seqs if s.is_fresh]
        if fresh and has_state(self.caches):
            zero_slots(self.caches, host_tensor(fresh, torch.int64, self.device))
        batch = self.build_batch(out)
        hidden = self.model(batch, self.caches)  # [T, hidden]
        if any(prompt_logprobs.rows_wanted(s) for s in out.seqs):
            with self._scope("prompt_logprobs"):
                prompt_logprobs.record(self.model.compute_logits, hidden, out.seqs)
        samplers = [s for s in out.seqs if s.samples]
        if not samplers:
            return ModelRunnerOutput(path)
        if self.takes_topk_head(samplers):
            with self._scope("lm_head"):
                values, indices, lse = self.model.compute_topk(hidden.index_select(0, batch.logits_indices), FUSED_K)
            return self._sample_topk(path, values, indices, lse, samplers)
        with self._scope("lm_head"):
            # index_select, not advanced indexing: on the CPU hidden[ids] runs a parallel kernel whose thread
            # hand-off costs more than the copy of a row or two
            logits = self.model.compute_logits(hidden.index_select(0, batch.logits_indices))  # [N, vocab]
        return self._sample(path, logits, samplers)

    def _run_split(self, out: SchedulerOutput) -> ModelRunnerOutput:
        """:meth:`split`'s parts: the decode graph is launched first, the prompts' prefill graphs (or their
        eager pass) queue behind it, and the prompts' sampling is the step's one wait."""
        decodes, prompts, replay = self.split(out)
        self.num_split_steps += 1
        pending, decoded = None, None
        if decodes is not None:
            if self._decode_path(decodes) is StepPath.DECODE_GRAPH:
                pending = self._launch_decode(decodes, None)
            else:
                decoded = self._run_logits_graph(decodes, StepPath.SPLIT)
        if replay:
            seqs = prompts.seqs
            if has_state(self.caches):
                zero_slots(self.caches, host_tensor([s.state_slot for s in seqs], torch.int64, self.device))
            rows = []
            for seq in seqs:
                rows.append(self._replay_prefill(seq).clone())  # the graphs' output buffer is reused
            self.num_prefill_graph_steps += len(seqs)
            result = self._sample(StepPath.SPLIT, torch.cat(rows), seqs)
        else:
            self.num_eager_steps += 1
            result = self._run_eager(prompts, StepPath.SPLIT)
        if pending is not None:
            result.sampled.update(zip([s.request_id for s in decodes.seqs], pending.tolist()))
        if decoded is not None:
            result.sampled.update(decoded.sampled)
            result.prompt_logits.update(decoded.prompt_logits)
        return result

    def _replay_prefill(self, seq) -> torch.Tensor:
        """Replay ``seq``'s prefill graph (its state slot zeroed already); ``[1, vocab]`` float32 logits, a
        view of the graphs' output buffer."""
        mm = seq.request.multimodal if self.own_positions else None
        positions = (mm.position_rows(0, seq.num_new_tokens, seq.request.num_prompt_tokens, self.position_rows)
                     if mm is not None else None)
        return self.prefill_graphs.run(seq.token_ids, [seq.block_tables[g] for g in self.groups], seq.state_slot,
                                       [(p, i) for p, i, _ in seq.checkpoints], positions=positions,
                                       media=self.encoder.spans([seq], [0]) if self.encoder is not None else ())

    def _sample(self, path: StepPath, logits: torch.Tensor, seqs: list) -> ModelRunnerOutput:
        """The eager sampler (with the logits processors where a request needs them) on ``logits``
        ``[N, vocab]`` float32, one row per sequence of ``seqs``; keeps the rows the prompt cache wants."""
        requests = [s.request for s in seqs]
        kept = kept_logits(logits, seqs)
        with self._scope("sampling"):
            ids = self.sample_rows(logits, requests)
        self.num_full_head_steps += 1
        return ModelRunnerOutput(path, sampled={r.request_id: t for r, t in zip(requests, ids)}, prompt_logits=kept)

    def _sample_topk(self, path: StepPath, values: torch.Tensor, indices: torch.Tensor, lse: torch.Tensor,
                     seqs: list) -> ModelRunnerOutput:
        """The eager sampler on the fused top-k head's candidates (``[N, 64]`` values and ids, ``[N]`` logsumexp),
        one row per sequence of ``seqs`` (:func:`~anna_core.engine.topk_head.sample_candidates`)."""
        requests = [s.request for s in seqs]
        with self._scope("sampling"):
            ids = sample_candidates(values, indices, lse, requests, self.model.vocab_size)
        self.num_topk_head_steps += 1
        return ModelRunnerOutput(path, sampled={r.request_id: t for r, t in zip(requests, ids)})

    def sample_rows(self, logits: torch.Tensor, requests: list) -> list[int]:
        """Sample ``logits`` ``[N, vocab]`` float32, one row per request of ``requests`` (a step's rows, or
        prompt-cache hits' stored logits), through the logits processors where a request needs them; the
        ``tolist`` is the step's one host sync."""
        return sample_rows(logits, requests, self.sampler, self.logits_processors)

    def _launch_decode(self, out: SchedulerOutput, prev_rows: dict[str, int] | None) -> PendingIds:
        """Stage and replay the captured decode graph with its sampler inside, without waiting for it."""
        graphs = self.graphs
        requests = [s.request for s in out.seqs]
        mode = self._sample_mode(requests, out.seqs)
        floats, ints = param_rows(requests, graphs.vocab_size) if mode not in ("greedy", "topk_greedy") else (None, None)
        tokens = [s.token_ids[0] for s in out.seqs]
        rows = None
        if PENDING in tokens:
            prev_rows = prev_rows or {}
            rows = [prev_rows.get(s.request_id, -1) if t == PENDING else -1 for s, t in zip(out.seqs, tokens)]
            if any(t == PENDING and r < 0 for t, r in zip(tokens, rows)):
                raise AnnaError("a decode input token is pending but no launched step produces it")
        pending = graphs.run(tokens, [s.start for s in out.seqs], self.batches.tables_by_group(out),
                             [s.state_slot for s in out.seqs], mode, floats, ints, prev_rows=rows,
                             rope_positions=self.batches.decode_positions(out))
        self.num_graph_steps += 1
        if mode.startswith("topk"):
            self.num_topk_head_steps += 1
        else:
            self.num_full_head_steps += 1
        return pending
