"""The decode step in flight under asynchronous scheduling (see :mod:`anna_core.engine.llm_engine`), and which steps
may be launched ahead (:func:`can_overlap`).

A graph decode step is launched without waiting; each of its requests gets a
:data:`~anna_core.engine.request.PENDING` placeholder as its newest token. The next engine call
launches the following step first (rows with a pending input token read it on the device), then
reads this step's ids back and :meth:`Inflight.fill` puts them in place of the placeholders (and, for a
model that declares ``side_outputs``, appends each request's side output of the step to
:attr:`~anna_core.engine.request.Request.side_outputs`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from anna_core.engine.graph_staging import PendingIds
from anna_core.engine.request import PENDING, Request, RequestStatus
from anna_core.engine.sched_output import SchedulerOutput, StepPath


class Inflight:
    """A launched graph decode step whose sampled ids are not read back yet.

    Args:
        ids: the step's sampled ids on their way to the host.
        requests: the requests this step gave a placeholder token.
        rows: request id -> the request's row in the step (its index in ``ids``).
    """

    __slots__ = ("ids", "requests", "rows")

    def __init__(self, ids: PendingIds, requests: list[Request], rows: dict[str, int]):
        self.ids = ids
        self.requests = requests
        self.rows = rows

    def live(self) -> list[Request]:
        """The requests whose placeholder is still to be filled: not finished meanwhile, and not preempted by a
        model that holds its last token (``recompute_holds_last``: the preemption dropped the placeholder; the token
        is computed again after the recompute)."""
        return [r for r in self.requests if not r.finished
                and not (r.status is RequestStatus.WAITING and r.output_token_ids[-1:] != [PENDING])]

    def fill(self, live: list[Request], ids: list[int], side_outputs: list[Any] | None = None) -> None:
        """Replace each ``live`` request's placeholder (its last token) by its sampled id, and append its row of
        ``side_outputs`` (the step's, in row order; None for a model without them) to its side outputs.

        Raises:
            RuntimeError: a request has no placeholder to fill (an engine bug, never bad input).
        """
        for req in live:
            if req.output_token_ids[-1] != PENDING:
                raise RuntimeError(f"request {req.request_id} has no pending token to fill")
            row = self.rows[req.request_id]
            req.output_token_ids[-1] = ids[row]
            if side_outputs is not None:
                req.side_outputs.append(side_outputs[row])


def can_overlap(out: SchedulerOutput, plan: Callable[[SchedulerOutput], StepPath]) -> bool:
    """Whether ``out`` may be launched without waiting (with asynchronous scheduling on): the runner runs it as a
    captured decode graph with the sampler inside (``plan``: :meth:`~anna_core.engine.model_runner.ModelRunner.plan`),
    no prompt-cache or snapshot work surrounds it, and no request of it holds its last token
    (``recompute_holds_last``: a held token is never a pending one; such a step, a recompute's, samples nothing and
    never replays a decode graph)."""
    if out.prompt_hits or not out.seqs:
        return False
    if any(s.request.held_token is not None for s in out.seqs):
        return False
    if any(s.capture_prompt or s.capture_snapshot or s.checkpoints or s.restore_snapshot is not None
           for s in out.seqs):
        return False
    return plan(out) is StepPath.DECODE_GRAPH


def resolve_pending(out: SchedulerOutput) -> None:
    """Re-read the input tokens of sequences that were scheduled while their token was pending
    (for a step that runs eagerly after the step in flight was read back)."""
    for seq in out.seqs:
        if PENDING in seq.token_ids:
            seq.token_ids = seq.request.token_slice(seq.start, seq.start + len(seq.token_ids))
