"""Driving an :class:`~anna_core.engine.llm_engine.LLMEngine` synchronously until its requests finish, and keeping the
logits its sampler sees."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import torch


def run_to_completion(engine: Any, prompts: Sequence[list[int]], params: Any = None, *, prefix: str = "r",
                      on_output: Callable[[Any], None] | None = None) -> list[Any]:
    """Add one request per prompt, step the engine until none is unfinished, return the final outputs.

    Args:
        engine: an ``LLMEngine`` (anything with ``add_request``, ``has_unfinished`` and ``step``).
        prompts: token ids per request; request ``i`` gets the id ``f"{prefix}{i}"``.
        params: one ``SamplingParams`` for all requests, a list with one per prompt, or None for the
            engine's defaults.
        prefix: request id prefix.
        on_output: called with every ``RequestOutput`` the engine yields (streamed deltas included),
            in order, e.g. to assert on each step.

    Returns:
        The finished ``RequestOutput`` of each prompt, in prompt order.

    Raises:
        KeyError: a request never produced a finished output (the engine dropped it).
    """
    per_prompt = params if isinstance(params, list) else [params] * len(prompts)
    for i, (prompt, sp) in enumerate(zip(prompts, per_prompt)):
        engine.add_request(f"{prefix}{i}", prompt, sp)
    final = {}
    while engine.has_unfinished():
        for out in engine.step():
            if on_output is not None:
                on_output(out)
            if out.finished:
                final[out.request_id] = out
    return [final[f"{prefix}{i}"] for i in range(len(prompts))]


class LogitsRecorder:
    """Wraps an engine's sampler (``engine.runner.sampler = LogitsRecorder(engine.runner.sampler)``) and keeps every
    logits row it is called with: ``rows[request id]``, one ``[vocab]`` float32 copy per sampling step, in order. Every
    other attribute is the wrapped sampler's."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.rows: defaultdict[str, list[torch.Tensor]] = defaultdict(list)

    def __call__(self, logits: torch.Tensor, requests: Sequence[Any], *args: Any, **kwargs: Any) -> Any:
        for i, r in enumerate(requests):
            self.rows[r.request_id].append(logits[i].detach().float().clone())
        return self.inner(logits, requests, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
