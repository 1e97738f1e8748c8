"""A CPU accelerator that claims graph support, so graph capture and replay are tested without a GPU::

    accel = FakeGraphAccelerator()
    engine.runner.accel = accel          # before the runner captures
    ...
    assert accel.captures > 0 and accel.replays > 0

"Capture" runs the step once under :class:`~anna_core.testing.host_reads.NoHostReads`, so a step that reads a
tensor's value on the host fails to capture; "replay" runs it again over the same static buffers, which is what a
real graph does with its kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from anna_core.device import Accelerator, StepGraph
from anna_core.testing.host_reads import NoHostReads

if TYPE_CHECKING:
    from anna_core.engine.cuda_graphs import DecodeGraphs


class FakeGraphAccelerator(Accelerator):
    """The CPU as a graph-capable device (see the module docstring); ``captures`` and ``replays`` count calls."""

    def __init__(self):
        super().__init__(torch.device("cpu"))
        self.captures = 0
        self.replays = 0

    @property
    def graphs(self) -> bool:
        return True

    def capture(self, fn: Callable[[], None], pool: object | None = None) -> StepGraph:
        """Run ``fn`` once, failing (``AssertionError``) at any host read; the graph's replay runs it again."""
        with NoHostReads():
            fn()
        self.captures += 1

        def replay() -> None:
            self.replays += 1
            fn()

        return StepGraph(replay)


def record_rows_launched_ahead(graphs: DecodeGraphs) -> list[int]:
    """Wrap ``graphs.run`` (a runner's captured decode graphs, from now on): the returned list gets, per decode graph
    launch, how many of its rows read their input token from the previous replay (``prev_rows`` entries ``>= 0``:
    the step was launched before the previous one was read back), 0 for a launch without ``prev_rows``."""
    counts: list[int] = []
    run = graphs.run

    def recording(*args, prev_rows=None, **kwargs):
        counts.append(sum(r >= 0 for r in prev_rows) if prev_rows is not None else 0)
        return run(*args, prev_rows=prev_rows, **kwargs)

    graphs.run = recording
    return counts
