"""One timed benchmark run and its checks: random token-id prompts, TTFT and inter-token latencies per step,
the served tokens against the eager greedy loop, and a digest of the tokens.

TTFT is the time from adding the requests to the end of the step that gave the last of them its first token;
every later step that delivers tokens is one inter-token latency for every stream (a step that only launches
work adds none of its own).
"""

from __future__ import annotations

from typing import Any

import torch

from anna_core.bench.roofline import wall_clock
from anna_core.errors import AnnaError


def random_prompts(vocab: int, batch: int, length: int, seed: int) -> list[list[int]]:
    """``batch`` prompts of ``length`` token ids uniform in ``[0, vocab)``, the same for the same ``seed`` (a fresh
    draw per run, so no prefix cache can help)."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, length), generator=gen).tolist()


def timed_run(engine: Any, prompts: list[list[int]], output_len: int, tag: str,
              logprobs: int | None = None, multimodal: list[Any] | None = None) -> dict[str, Any]:
    """Generate ``output_len`` greedy tokens for each prompt (with ``logprobs`` top log-probabilities
    per token when given: such steps take the captured logits graph and the eager sampler; with
    ``multimodal``, each prompt's :class:`~anna_core.multimodal.MultiModalInputs`); returns
    ``ttft_s``, ``itl_s`` (list) and the generated ids per request.

    Raises:
        AnnaError: a request failed, or ``logprobs`` was asked and a token came without them.
    """
    from anna_core.engine.sampling_params import SamplingParams

    params = SamplingParams(max_tokens=output_len, temperature=0.0, ignore_eos=True, logprobs=logprobs)
    t0 = wall_clock()
    for i, p in enumerate(prompts):
        engine.add_request(f"{tag}-{i}", p, params, multimodal=None if multimodal is None else multimodal[i])
    waiting = {f"{tag}-{i}" for i in range(len(prompts))}
    ttft = None
    itl: list[float] = []
    tokens: dict[str, list[int]] = {}
    last = t0
    while engine.has_unfinished():
        outs = engine.step()
        now = wall_clock()
        produced = False
        for o in outs:
            waiting.discard(o.request_id)
            if o.error:
                raise AnnaError(f"benchmark request {o.request_id} failed: {o.error}")
            produced = produced or bool(o.delta_token_ids)
            if logprobs is not None and o.delta_token_ids and len(o.logprobs) != len(o.delta_token_ids):
                raise AnnaError(f"benchmark request {o.request_id} got tokens without their logprobs")
            if o.finished:
                tokens[o.request_id] = list(o.token_ids)
        if not produced:
            continue  # e.g. a step launched without waiting (asynchronous scheduling): no token yet
        if ttft is not None:
            itl.append(now - last)  # time between consecutive token-bearing steps
        elif not waiting:
            ttft = now - t0
        last = now
    return {"ttft_s": ttft, "itl_s": itl, "tokens": [tokens[f"{tag}-{i}"] for i in range(len(prompts))]}


SERVED_VS_EAGER_TOKENS = 16
"""Leading tokens of every stream the benchmark compares with the eager greedy loop."""


def served_vs_eager(model: Any, prompts: list[list[int]], served: list[list[int]],
                    n: int = SERVED_VS_EAGER_TOKENS) -> int:
    """How many leading tokens (of the first ``n``) every stream served by the engine (graphs,
    asynchronous scheduling, the chosen kernels) shares with Anna's eager greedy loop over the same
    prompts (:func:`anna_core.testing.runner.simple_greedy_batch`): a check of the captured step.

    The eager loop runs with ``ANNA_TRITON_PDL=0`` (anna-xpu-kernels then launches its kernels without
    programmatic dependent launch, with the same arithmetic), so a kernel reading its predecessor's
    output too early shows up as a mismatch instead of on both sides.
    """
    import os
    from unittest import mock

    from anna_core.testing.runner import simple_greedy_batch

    n = min(n, min(len(t) for t in served))
    with mock.patch.dict(os.environ, {"ANNA_TRITON_PDL": "0"}):
        eager = simple_greedy_batch(model, prompts, n)
    return min(next((i for i, (a, b) in enumerate(zip(x, y)) if a != b), n) for x, y in zip(served, eager))


def tokens_sha256(streams: list[list[int]]) -> str:
    """SHA-256 of the generated token ids of every stream (in order, as ``"1,2,3;4,5"``), so that two runs (e.g.
    offloaded experts and fully resident) compare by one string."""
    import hashlib

    return hashlib.sha256(";".join(",".join(map(str, t)) for t in streams).encode()).hexdigest()


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (``0 <= q <= 1``) as the nearest-rank element; NaN for none."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    idx = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[idx]
