"""Checks that a tensor-parallel ``LLM`` generates what the same model on one device does (families' tests).

    ref = LLM(path, device="cpu", dtype="fp32")
    tp = LLM(path, device="cpu", dtype="fp32", tensor_parallel_size=2)   # gloo on the CPU
    assert_same_generation(ref, tp, prompts, SamplingParams(temperature=0, max_tokens=8, logprobs=3))

A family's tensor-parallel test module subclasses :class:`TensorParallelSuite` (one checkpoint, one worker spawn
per class; its prompts and the family's own shard checks are the subclass's)::

    class TestMyFamilyTensorParallel(TensorParallelSuite):
        batch_prompts = ([3, 4, 5, 6], [10, 11, 12], [8] * 9)
        single_prompt = [40, 41, 42, 43]
        prefix = list(range(100, 140))

        def build_checkpoint(self, path):
            return build_tiny_my_family(path)

        def test_shards(self, tp_pair):
            ref, tp = tp_pair
            ...
"""

from __future__ import annotations

import contextlib
import math
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

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


@contextlib.contextmanager
def one_and_two_ranks(path: str | Path, **options: Any) -> Iterator[tuple[Any, Any]]:
    """``(one rank, two ranks)`` :class:`~anna_core.LLM` s over ``path`` with ``options`` (e.g. ``device="cpu"``:
    the ranks join over gloo), torch at one thread (per rank) while they live; the two-rank one's workers are
    stopped on exit."""
    import torch

    from anna_core import LLM

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ref = LLM(path, **options)
        tp = LLM(path, tensor_parallel_size=2, **options)
        try:
            yield ref, tp
        finally:
            tp.close()
    finally:
        torch.set_num_threads(threads)


class TensorParallelSuite:
    """Base class of a family's tensor-parallel tests on the CPU (see the module docstring): 2 ranks give the
    greedy tokens and float32 top-3 log-probabilities of one rank, batched and single, and with prefix caching.

    Class attributes a subclass sets:
        batch_prompts: prompts generated together; their continuations must differ (a real comparison).
        single_prompt: a prompt generated alone.
        prefix: a shared prefix (longer than the family's sliding window or snapshot interval); each of
            ``prefix_tails`` is appended to it and generated in turn, so the later ones hit the prefix cache.
        prefix_tails: default ``([3], [4, 5])``.
        options: the ``LLM`` options of both (default float32 on the CPU, 64 blocks, prefix caching on).
        max_tokens: greedy tokens per prompt (default 8), each with its top 3 log-probabilities.

    Method a subclass implements:
        build_checkpoint(path) -> Path: write a tiny checkpoint under ``path`` (its heads and units divisible
            by 2) and return its folder. Called once per class.

    Fixture: ``tp_pair``, the ``(one rank, two ranks)`` LLMs (:func:`one_and_two_ranks`), for the subclass's own
    tests.
    """

    batch_prompts: ClassVar[tuple[list[int], ...]] = ()
    single_prompt: ClassVar[list[int]] = []
    prefix: ClassVar[list[int]] = []
    prefix_tails: ClassVar[tuple[list[int], ...]] = ([3], [4, 5])
    options: ClassVar[dict[str, Any]] = {"device": "cpu", "dtype": "fp32", "num_blocks": 64,
                                         "enable_prefix_caching": True}
    max_tokens: ClassVar[int] = 8

    def build_checkpoint(self, path: Path) -> Path:
        raise NotImplementedError(f"{type(self).__name__} must implement build_checkpoint(path)")

    @classmethod
    def greedy(cls) -> Any:
        from anna_core import SamplingParams

        return SamplingParams(temperature=0, max_tokens=cls.max_tokens, ignore_eos=True, logprobs=3)

    @pytest.fixture(scope="class")
    @classmethod
    def tp_pair(cls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
        path = cls().build_checkpoint(tmp_path_factory.mktemp(f"tp-{cls.__name__}"))
        with one_and_two_ranks(path, **cls.options) as pair:
            yield pair

    def test_batched_and_single_greedy_equal_one_rank(self, tp_pair: tuple[Any, Any]):
        ref, tp = tp_pair
        tokens = assert_same_generation(ref, tp, list(self.batch_prompts), self.greedy())
        assert len({tuple(t) for t in tokens}) == len(self.batch_prompts)  # the continuations differ
        assert_same_generation(ref, tp, [self.single_prompt], self.greedy())

    def test_prompt_logprobs_equal_one_rank(self, tp_pair: tuple[Any, Any]):
        """Prompt logprobs under tensor parallelism: every rank runs the prompt rows' LM-head calls (a vocabulary-
        parallel head gathers across ranks), rank 0's entries equal one rank's; then a plain request still runs."""
        from anna_core import SamplingParams

        ref, tp = tp_pair
        params = SamplingParams(temperature=0, max_tokens=2, ignore_eos=True, prompt_logprobs=2)
        got = []
        for llm in (ref, tp):
            engine, rid, final = llm.engine, f"plp-{uuid.uuid4().hex[:8]}", None
            engine.add_request(rid, list(self.batch_prompts[0]), params)
            while engine.has_unfinished():
                for out in engine.step():
                    final = out if out.request_id == rid else final
            got.append(final.prompt_logprobs)
        want, mine = got
        assert want[0] is None and mine[0] is None and len(want) == len(mine) == len(self.batch_prompts[0])
        for a, b in zip(want[1:], mine[1:]):
            assert a.token_id == b.token_id and math.isclose(a.logprob, b.logprob, abs_tol=LOGPROB_ATOL)
            assert [t for t, _ in a.top] == [t for t, _ in b.top]
        assert_same_generation(ref, tp, [self.single_prompt], self.greedy())

    def test_prefix_cache_equals_one_rank(self, tp_pair: tuple[Any, Any]):
        """Every tail after the first resumes from the cached prefix (a recurrent model's from a restored state
        snapshot, every rank restoring its own)."""
        ref, tp = tp_pair
        for n, tail in enumerate(self.prefix_tails):
            assert_same_generation(ref, tp, [self.prefix + tail], self.greedy())
            if n == 0 and tp.engine.cache_spec.recurrent is not None:
                assert len(tp.engine.scheduler.snapshots) > 0
        assert tp.engine.stats()["prefix_cache_hit_rate"] > 0
