"""The engine of a tensor-parallel group: rank 0 schedules and broadcasts, every rank computes its shard.

Every rank builds the same :class:`TensorParallelEngine` over its shard of the model (its heads' caches,
state slots and stores, sized alike on every rank). On rank 0 it is the engine callers drive
(``LLM``, the server): it schedules, samples (from logits gathered over the vocabulary shards) and emits
outputs, and before each piece of device work its :class:`PlanBroadcaster` (the engine's
:class:`~anna_core.engine.step_broadcast.StepBroadcaster`) broadcasts a
:class:`~anna_core.distributed.plan_wire.StepPlan`.
The other ranks run :func:`serve_steps`: they apply each plan to their own caches and run the same forward
passes, so the collectives inside the model meet. Asynchronous scheduling is off (each step is read back
before the next is broadcast); graphs are captured per rank with the collectives inside (NCCL), the
captures happening in the same order on every rank since every rank sets its runner up alike.
"""

from __future__ import annotations

import logging
from typing import Any

import attrs
import torch

from anna_core.distributed.plan_wire import StepPlan, to_wire
from anna_core.distributed.state import ParallelState
from anna_core.engine.cache_allocator import reset_residual
from anna_core.engine.config import EngineConfig
from anna_core.engine.llm_engine import LLMEngine
from anna_core.engine.sampler import host_tensor
from anna_core.engine.sched_output import Capture, SchedulerOutput
from anna_core.engine.step_broadcast import StepBroadcaster
from anna_core.errors import AnnaError
from anna_core.model import LoadedModel

log = logging.getLogger("anna.distributed")


class PlanBroadcaster(StepBroadcaster):
    """Rank 0's :class:`~anna_core.engine.step_broadcast.StepBroadcaster`: each hook sends the other ranks a
    :class:`StepPlan` for the device work that follows (residual rings emptied since the last step travel with
    the next step). Every rank's engine holds one and calls :meth:`agree_num_blocks` (a collective of all ranks)
    while it is built; the other hooks run on rank 0 only, the one engine that steps.

    Args:
        parallel: the rank's state (its ``cpu_group`` and :meth:`~ParallelState.broadcast_object`).
    """

    def __init__(self, parallel: ParallelState):
        self.parallel = parallel
        self._residual_slots: list[int] = []

    def agree_num_blocks(self, num_blocks: list[int]) -> list[int]:
        """The smallest per group over the ranks: block ids from rank 0's scheduler must be valid in every
        rank's pools."""
        if not num_blocks:
            return num_blocks
        agreed = torch.tensor(num_blocks, dtype=torch.int64)
        torch.distributed.all_reduce(agreed, op=torch.distributed.ReduceOp.MIN, group=self.parallel.cpu_group)
        return [int(n) for n in agreed.tolist()]

    def residual_reset(self, slots: list[int]) -> None:
        self._residual_slots += slots

    def before_step(self, out: SchedulerOutput) -> None:
        slots, self._residual_slots = self._residual_slots, []
        self.parallel.broadcast_object(StepPlan(residual_slots=slots, out=to_wire(out)))

    def before_capture(self, captures: list[Capture]) -> None:
        self.parallel.broadcast_object(StepPlan(captures=captures))

    def stop(self) -> None:
        """Tell the other ranks to leave :func:`serve_steps`."""
        self.parallel.broadcast_object(StepPlan(stop=True))


class TensorParallelEngine(LLMEngine):
    """An :class:`~anna_core.engine.llm_engine.LLMEngine` over one rank's shard of a model, with a
    :class:`PlanBroadcaster` as its broadcaster.

    Args:
        model: the rank's shard (a model loaded with ``parallel``).
        parallel: the rank's state.
        **kwargs: as :class:`LLMEngine` (``config.async_scheduling`` is turned off; ``broadcaster`` is this
            engine's own).

    Raises:
        AnnaError: a model that takes media (its encoder is not sharded yet), or as :class:`LLMEngine`.
    """

    def __init__(self, model: Any, *, parallel: ParallelState, **kwargs: Any):
        if model.capabilities.modalities:
            raise AnnaError("tensor parallelism serves text models; this one takes "
                            f"{', '.join(model.capabilities.modalities)} (serve it with --tensor-parallel-size 1)")
        self.parallel = parallel
        self.plans = PlanBroadcaster(parallel)
        kwargs["config"] = attrs.evolve(kwargs.get("config") or EngineConfig(), async_scheduling=False)
        super().__init__(model, broadcaster=self.plans, **kwargs)

    @classmethod
    def from_loaded(cls, loaded: LoadedModel, config: Any = None) -> TensorParallelEngine:
        return cls(loaded.model, parallel=loaded.parallel, tokenizer=loaded.tokenizer, config=config,
                   device=loaded.device, dtype=loaded.dtype, eos_token_ids=loaded.generation.eos_token_ids,
                   model_max_len=loaded.max_model_len, expert_store=loaded.expert_store)

    def close(self) -> None:
        """Tell the other ranks to leave :func:`serve_steps` (rank 0)."""
        self.plans.stop()

    def stats(self) -> dict[str, Any]:
        return super().stats() | {"tensor_parallel_size": self.parallel.world_size}

    # -- ranks > 0: apply rank 0's plans ---------------------------------------------------------

    def apply(self, plan: StepPlan) -> None:
        """Do on this rank's caches what rank 0 does for ``plan``: residual resets, restores, the forward pass
        (its sampled ids are dropped: rank 0's are the tokens), captures."""
        if plan.residual_slots and self.has_residual:
            reset_residual(self.caches, host_tensor(plan.residual_slots, torch.int64, self.device))
        out = plan.out
        if out is not None:
            self.transfers.restore(out)
            if out.seqs:
                self.runner.execute(out)
        self.transfers.save(plan.captures)


def serve_steps(engine: TensorParallelEngine) -> int:
    """A worker rank's loop: receive rank 0's plans and apply them until told to stop; returns the number of
    plans applied. The wait for a plan does not time out (:data:`~anna_core.distributed.state.PLAN_WAIT`: a server
    may idle for hours); it ends when rank 0 exits. A failure here ends the worker (logged); rank 0's next collective
    then fails (:class:`~anna_core.errors.DeviceLostError`) and its engine degrades."""
    applied = 0
    while True:
        plan = engine.parallel.broadcast_object()
        if plan.stop:
            return applied
        try:
            engine.apply(plan)
        except Exception:
            log.exception("rank %d: applying a step failed; the worker stops", engine.parallel.rank)
            raise
        applied += 1
