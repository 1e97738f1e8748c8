"""Tasks: what a family's models do (``generate``, ``transcribe``, ``speech``) and how a server runs it.

A task is registered through ``register_tasks`` as an :class:`anna_core.registry.TaskSpec`; the
protocols below are what ``anna serve`` reads from a task's engine and client. anna-core's own task,
``generate``, lives in :mod:`anna_core.tasks.generate`.
"""

from __future__ import annotations

from typing import Any, Protocol


class TaskEngine(Protocol):
    """What a task's ``build`` returns, as ``anna serve`` sees it."""

    max_model_len: int
    """Tokens per request (prompt + output) the engine accepts; 0 when the task has no such limit."""


class TaskClient(Protocol):
    """What a task's ``start`` returns: the object handlers reach as ``server.engine``."""

    @property
    def metrics(self) -> Any:
        """The engine's :class:`~anna_core.metrics.EngineMetrics` (``/metrics``), or None."""

    def stats(self) -> dict[str, Any]:
        """JSON-ready engine statistics (shown on ``/healthz``)."""

    async def shutdown(self, drain: bool = True) -> None:
        """Stop taking requests; with ``drain`` finish the running ones first."""
