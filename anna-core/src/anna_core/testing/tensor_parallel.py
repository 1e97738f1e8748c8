"""Checks that a tensor-parallel ``LLM`` generates what the same model on one device does (families' tests).

    ref = LLM(path, device="cpu", dtype="fp32")
    tp = LLM(path, device="cpu", dtype="fp32", tensor_parallel_size=2)   # gloo on the CPU
    assert_same_generation(ref, tp, prompts, SamplingParams(temperature=0, max_tokens=8, logprobs=3))
"""

from __future__ import annotations

import math
import uuid
from typing import Any

LOGPROB_ATOL = 1e-4
"""How far a float32 log-probability may move when the ranks sum partial products in another order."""


def generate_logged(llm: Any, prompts: list[list[int]], params: Any) -> list[tuple[list[int], list[Any]]]:
    """Each prompt's ``(token ids, TokenLogprob per token)``, all prompts batched in ``llm``'s engine (every
    step's deltas joined, as ``LLM.generate`` keeps only the last)."""
    engine = llm.engine
    run = uuid.uuid4().hex[:8]
    ids = [f"tp-check-{run}-{i}" for i in range(len(prompts))]
    for request_id, prompt in zip(ids, prompts):
        engine.add_request(request_id, prompt, params)
    tokens: dict[str, list[int]] = {i: [] for i in ids}
    logprobs: dict[str, list[Any]] = {i: [] for i in ids}
    while engine.has_unfinished():
        for out in engine.step():
            tokens[out.request_id] += out.delta_token_ids
            logprobs[out.request_id] += out.logprobs
    return [(tokens[i], logprobs[i]) for i in ids]


def assert_same_generation(ref: Any, tp: Any, prompts: list[list[int]], params: Any,
                           atol: float = LOGPROB_ATOL) -> list[list[int]]:
    """Generate ``prompts`` (batched) with both LLMs and assert equal token ids and, with ``params.logprobs``,
    each step's top log-probabilities (ids equal, values within ``atol``); returns the token ids.

    Raises:
        AssertionError: they differ (the message names the prompt and step).
    """
    want, got = generate_logged(ref, prompts, params), generate_logged(tp, prompts, params)
    for n, ((ids_a, lp_a), (ids_b, lp_b)) in enumerate(zip(want, got)):
        assert ids_a == ids_b, f"prompt {n}: size 1 gave {ids_a}, tensor parallel {ids_b}"
        assert len(lp_a) == len(lp_b)
        for step, (a, b) in enumerate(zip(lp_a, lp_b)):
            assert [t for t, _ in a.top] == [t for t, _ in b.top], f"prompt {n} step {step}: {a.top} vs {b.top}"
            for (_, x), (_, y) in zip(a.top, b.top):
                assert math.isclose(x, y, abs_tol=atol), f"prompt {n} step {step}: logprob {x} vs {y}"
    return [ids for ids, _ in want]
