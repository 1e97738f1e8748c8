"""The scheduler's plan as rank 0 broadcasts it to the other ranks each step.

A :class:`StepPlan` carries what the workers' devices must do in the order rank 0 does it: reset residual
rings of newly assigned slots, restore cached states, run the step's forward pass (the
:class:`~anna_core.engine.sched_output.SchedulerOutput` itself), and the state captures after it. Requests
travel as light copies: the host-only parts (detokenizer, stop-string checker, grammar matcher, logprobs,
prefix hashes) stay on rank 0, which alone samples and emits outputs.
"""

from __future__ import annotations

import copy

import attrs

from anna_core.engine.request import Request
from anna_core.engine.sched_output import Capture, SchedulerOutput


@attrs.define
class StepPlan:
    """One broadcast from rank 0.

    Attributes:
        residual_slots: state slots whose residual rings are emptied first.
        out: the step to restore and compute (None: none).
        captures: snapshot / prompt-cache state copies to make (after the step that produced them).
        stop: the workers leave their loop.
    """

    residual_slots: list[int] = attrs.Factory(list)
    out: SchedulerOutput | None = None
    captures: list[Capture] = attrs.Factory(list)
    stop: bool = False


def _light(req: Request) -> Request:
    """A copy of ``req`` without its host-only parts (pickled cheaply; the worker never samples for it)."""
    light = copy.copy(req)
    light.detokenizer = light.stop_checker = light.grammar = None
    light.logprobs = []
    # the prompt-logprob rows a step records follow the entries' count (engine.prompt_logprobs.rows_wanted): a worker
    # runs the same LM-head calls (vocabulary-parallel: collectives) with placeholders of the same length
    light.prompt_logprobs = [None] * len(req.prompt_logprobs)
    light.block_hashes = []
    return light


def to_wire(out: SchedulerOutput) -> SchedulerOutput:
    """``out`` as the workers need it: its sequences and prompt-cache hits over light request copies (one per
    request), without the host-side bookkeeping (preemptions, lookups, captures, media)."""
    requests: dict[str, Request] = {}

    def light(req: Request) -> Request:
        if req.request_id not in requests:
            requests[req.request_id] = _light(req)
        return requests[req.request_id]

    return SchedulerOutput(seqs=[attrs.evolve(s, request=light(s.request)) for s in out.seqs],
                           num_batched_tokens=out.num_batched_tokens,
                           prompt_hits=[attrs.evolve(h, request=light(h.request)) for h in out.prompt_hits])
