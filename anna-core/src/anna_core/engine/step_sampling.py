"""The sampling hand-off of a step: which sampler its rows take, and its logits rows to sampled ids.

A decode graph samples inside the graph in one of its captured modes (:func:`decode_sample_mode`); every other
step samples its ``[N, vocab]`` float32 logits eagerly (:func:`sample_rows`: the
:class:`~anna_core.engine.sampler.Sampler`, or the logits processors for requests with logit bias, grammars or
logprobs), and keeps the rows of prompts the prompt cache stores (:func:`kept_logits`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from anna_core.engine.logits_processors import LogitsProcessors, needs_processing
from anna_core.engine.request import Request
from anna_core.engine.sampler import Sampler, unfiltered
from anna_core.engine.sched_output import ScheduledSeq


def wants_logits(seq: ScheduledSeq) -> bool:
    """Whether the step must return ``seq``'s last-row logits: it completes a prompt the prompt cache stores, and
    its request's logits are not processed (processed logits are not what a later hit would sample)."""
    return seq.capture_prompt and not needs_processing(seq.request.params)


def kept_logits(logits: torch.Tensor, seqs: Sequence[ScheduledSeq]) -> dict[str, torch.Tensor]:
    """Request id -> a float32 copy of its row of ``logits`` (``[N, vocab]``, one row per sequence of ``seqs``),
    for the sequences whose logits the prompt cache keeps (:func:`wants_logits`)."""
    return {s.request_id: logits[i].detach().to(torch.float32).clone()
            for i, s in enumerate(seqs) if wants_logits(s)}


def sample_rows(logits: torch.Tensor, requests: Sequence[Request], sampler: Sampler,
                logits_processors: LogitsProcessors | None) -> list[int]:
    """Sample ``logits`` ``[N, vocab]`` float32, one row per request of ``requests``, through the logits
    processors where a request needs them, else ``sampler``; the ``tolist`` is the step's one host sync."""
    if logits_processors is not None and any(needs_processing(r.params) for r in requests):
        return logits_processors.sample(logits, requests, sampler)
    return sampler(logits, requests).tolist()


def decode_sample_mode(requests: Sequence[Request], modes: Sequence[str], vocab_size: int, *, topk_head: bool) -> str:
    """The captured sampler of a decode step among the graphs' ``modes``: with the fused top-k head (when
    captured and ``topk_head``, the step takes it) ``"topk_greedy"`` (every row greedy) or ``"topk_sample"``; else
    ``"greedy"``, ``"sample_plain"`` (no row filters its distribution, when captured) or ``"sample"``."""
    greedy = all(r.params.temperature == 0.0 for r in requests)
    if "topk_sample" in modes and topk_head:
        return "topk_greedy" if greedy else "topk_sample"
    if greedy:
        return "greedy"
    if "sample_plain" in modes and unfiltered(requests, vocab_size):
        return "sample_plain"
    return "sample"
