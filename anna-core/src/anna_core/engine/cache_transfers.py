"""State copies around a step: cache hits restored before it, snapshots and prompt-cache entries saved after it.

The scheduler decides them (``ScheduledSeq.restore_snapshot``, ``SchedulerOutput.prompt_hits``,
``SchedulerOutput.captures`` filled by :meth:`~anna_core.engine.scheduler.Scheduler.update`);
:class:`CacheTransfers` moves the tensors between the model's caches and the two
:class:`~anna_core.engine.state_store.StateStore`\\ s: the recurrent-state snapshots of the prefix cache and the
exact-prompt cache (states, tail blocks and the last-row logits its hits sample their first token from).
"""

from __future__ import annotations

import torch

from anna_core.engine.sched_output import Capture, SchedulerOutput
from anna_core.engine.state_store import StateStore, copy_blocks
from anna_core.engine.step_broadcast import StepBroadcaster
from anna_core.model import ModelCaches


class CacheTransfers:
    """Copies between the caches and the snapshot and prompt stores.

    Args:
        caches: the model's allocated caches.
        snapshot_store: the prefix cache's recurrent-state snapshots.
        prompt_store: the exact-prompt cache's states (with their residual rings) and logits rows.
        broadcaster: told of the captures before they are copied (tensor parallelism's mirrors copy theirs).
    """

    def __init__(self, caches: ModelCaches, snapshot_store: StateStore, prompt_store: StateStore,
                 broadcaster: StepBroadcaster):
        self.caches = caches
        self.snapshot_store = snapshot_store
        self.prompt_store = prompt_store
        self.broadcaster = broadcaster

    def restore(self, out: SchedulerOutput) -> None:
        """Cache hits of ``out``: snapshot states into slots; prompt-cache states and tail blocks."""
        restores = [(s.restore_snapshot, s.state_slot) for s in out.seqs if s.restore_snapshot is not None]
        if restores:
            self.snapshot_store.load(self.caches, [i for i, _ in restores], [s for _, s in restores])
        if out.prompt_hits:
            hits = out.prompt_hits
            self.prompt_store.load(self.caches, [h.entry.store_idx for h in hits], [h.state_slot for h in hits])
            copy_blocks(self.caches, [c for h in hits for c in h.tail_copies])

    def hit_logits(self, out: SchedulerOutput) -> torch.Tensor:
        """The stored last-row logits of ``out``'s prompt-cache hits, ``[N, vocab]`` float32 in hit order."""
        return torch.stack([self.prompt_store.logits[h.entry.store_idx] for h in out.prompt_hits])

    def capture(self, out: SchedulerOutput, prompt_logits: dict[str, torch.Tensor]) -> list[str]:
        """The state copies :meth:`~anna_core.engine.scheduler.Scheduler.update` asked for (snapshots,
        prompt-cache entries with the runner's last-row logits of each completed prompt, request id -> ``[vocab]``
        float32).

        Returns:
            The request ids whose prompt-cache entry got no logits row (the runner kept none: processed logits);
            the caller drops those entries.
        """
        done = [c for c in out.captures if c.kind == "snapshot" or c.request_id in prompt_logits]
        if done:
            self.broadcaster.before_capture(done)
        missing = []
        for c in out.captures:
            if c.kind != "prompt":
                continue
            logits = prompt_logits.get(c.request_id)
            if logits is None:
                missing.append(c.request_id)
                continue
            self.prompt_store.logits[c.index] = logits
        self.save(done)
        return missing

    def save(self, captures: list[Capture]) -> None:
        """Copy the states of ``captures`` from their slots into their stores: snapshots, then prompt-cache entries
        (their logits rows are :meth:`capture`'s; a tensor-parallel mirror keeps none)."""
        snaps = [c for c in captures if c.kind == "snapshot"]
        if snaps:
            self.snapshot_store.save(self.caches, [c.state_slot for c in snaps], [c.index for c in snaps])
        prompts = [c for c in captures if c.kind == "prompt"]
        if prompts:
            self.prompt_store.save(self.caches, [c.state_slot for c in prompts], [c.index for c in prompts])
