"""What an engine tells the engines that mirror its device work (the other ranks of a tensor-parallel group).

:class:`~anna_core.engine.llm_engine.LLMEngine` calls its :class:`StepBroadcaster` (a constructor argument) at
each point where a mirroring engine must do the same device work, in the same order, on its own caches: sizing
the block pools, emptying residual rings, restoring cached states before a forward pass, copying states after
it. The base class is the one-device behaviour: nothing to tell, the pools as planned.
:class:`~anna_core.distributed.engine.PlanBroadcaster` (tensor parallelism) overrides the hooks to broadcast
rank 0's :class:`~anna_core.distributed.plan_wire.StepPlan`.
"""

from __future__ import annotations

from anna_core.engine.sched_output import Capture, SchedulerOutput


class StepBroadcaster:
    """The engine's hooks for mirrored device work; every one is a no-op here (one device).

    The engine calls them in this order within a step: :meth:`residual_reset` (if any ring was emptied),
    :meth:`before_step` (a step with work), :meth:`before_capture` (a step read back with state copies).
    """

    def agree_num_blocks(self, num_blocks: list[int]) -> list[int]:
        """Blocks per attention group that every mirroring engine can hold, given this engine's plan (a list in
        the order of ``CacheSpec.attention_groups``; empty for a model without paged attention). Called once,
        from the engine's constructor. Here: ``num_blocks`` unchanged."""
        return num_blocks

    def residual_reset(self, slots: list[int]) -> None:
        """The engine emptied the residual rings (``--kv-cache-residual-len``) of state ``slots``."""

    def before_step(self, out: SchedulerOutput) -> None:
        """The engine is about to restore ``out``'s cached states (snapshots, prompt-cache entries) and then run
        its forward pass (when ``out.seqs`` is not empty)."""

    def before_capture(self, captures: list[Capture]) -> None:
        """The engine is about to make ``captures`` (at least one; only those it performs: a prompt whose logits
        row the runner kept none of is left out) after the step that produced them was read back."""
