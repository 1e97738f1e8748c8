"""The family conformance suite (see :mod:`anna_core.testing.conformance`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

from anna_core.testing.conformance.compare import relative_error
from anna_core.testing.parser_streams import ParserSample


class FamilyConformance:
    """Base class of a family plugin's conformance tests (see the module docstring).

    Class attributes a subclass sets:
        family: the family name (``ModelFamilySpec.name``) the loader must report. Required.
        prompt_length: tokens of the prompts built from the checkpoint's vocabulary (default 40; make it
            longer than a sliding window to test one).
        greedy_tokens: greedy tokens compared with HF (default 12).
        logits_tolerance: bound of :func:`relative_error` against HF's float32 logits (default 1e-4).
        logprob_atol: bound on top log-probability differences between two engine runs (default 1e-4).
        block_size: KV block size of the test engines (default 8: small, so prompts span many blocks).
        chat: whether the checkpoint's tokenizer has a chat template for the server test (default True).
        parser_samples: :class:`~anna_core.testing.parser_streams.ParserSample` s, completions as the family's
            models write them with the reasoning, content and tool calls its parsers must make of them. Required
            when the family declares a reasoning or tool-call parser (``ModelFamilySpec.reasoning_parser`` /
            ``tool_call_parser``); cover its reasoning block (pre-filled by the prompt and opened by the
            output), an answer, and one and several calls.
        parser_random_splits: seeded random cuts of each sample's output, besides every two-piece cut and one
            character at a time (default 64).

    Method a subclass implements:
        build_checkpoint(path): save a tiny random checkpoint (``config.json``, weights, tokenizer) to
            ``path``, e.g. with transformers' ``save_pretrained``. Called once per class.
    """

    family: ClassVar[str] = ""
    prompt_length: ClassVar[int] = 40
    greedy_tokens: ClassVar[int] = 12
    logits_tolerance: ClassVar[float] = 1e-4
    logprob_atol: ClassVar[float] = 1e-4
    block_size: ClassVar[int] = 8
    chat: ClassVar[bool] = True
    parser_samples: ClassVar[tuple[ParserSample, ...]] = ()
    parser_random_splits: ClassVar[int] = 64

    def build_checkpoint(self, path: Path) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement build_checkpoint(path)")

    # -- fixtures (one checkpoint and one loaded model per class) --------------------------------

    @pytest.fixture(scope="class")
    @classmethod
    def conformance_checkpoint(cls, tmp_path_factory: pytest.TempPathFactory) -> Path:
        if not cls.family:
            raise TypeError(f"{cls.__name__} must set the class attribute `family`")
        path = tmp_path_factory.mktemp(f"conformance-{cls.family}")
        cls().build_checkpoint(path)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"build_checkpoint wrote no config.json into {path}")
        return path

    @pytest.fixture(scope="class")
    @classmethod
    def conformance_loaded(cls, conformance_checkpoint: Path) -> Any:
        from anna_core.loading import load_model

        return load_model(conformance_checkpoint, device="cpu", dtype="fp32")

    @pytest.fixture(scope="class")
    @classmethod
    def conformance_hf(cls, conformance_checkpoint: Path) -> Any:
        from anna_core.testing.oracle import hf_model

        return hf_model(conformance_checkpoint)

    @pytest.fixture(scope="class")
    @classmethod
    def conformance_prompts(cls, conformance_loaded: Any) -> list[list[int]]:
        """Three seeded prompts over the vocabulary: two sharing their first half, one short."""
        vocab = int(conformance_loaded.model.vocab_size)
        gen = torch.Generator().manual_seed(1234)
        n = cls.prompt_length
        a = torch.randint(3, vocab, (n,), generator=gen).tolist()
        b = a[: n // 2] + torch.randint(3, vocab, (n - n // 2,), generator=gen).tolist()
        c = torch.randint(3, vocab, (max(1, n // 5),), generator=gen).tolist()
        return [a, b, c]

    def engine(self, loaded: Any, **overrides: Any) -> Any:
        """A CPU :class:`~anna_core.engine.llm_engine.LLMEngine` over ``loaded`` with small blocks."""
        from anna_core.engine.config import EngineConfig
        from anna_core.engine.llm_engine import LLMEngine

        cfg = {"block_size": self.block_size, "num_blocks": 4 * (4 * self.prompt_length // self.block_size + 8),
               "max_num_seqs": 4, "max_prefill_tokens": 4 * self.prompt_length, "prompt_cache_size": 0,
               **overrides}
        return LLMEngine.from_loaded(loaded, EngineConfig(**cfg))

    def run(self, engine: Any, prompts: list[list[int]], prefix: str, max_tokens: int | None = None,
            on_output: Any = None) -> list[Any]:
        """Greedy outputs of ``prompts``, in order, each with the top-5 log-probabilities of every token it
        generated (joined from the streamed deltas into its ``logprobs``)."""
        from anna_core.engine.sampling_params import SamplingParams
        from anna_core.testing.engine_run import run_to_completion

        params = SamplingParams(temperature=0.0, max_tokens=max_tokens or self.greedy_tokens, ignore_eos=True,
                                logprobs=5)
        logprobs: dict[str, list[Any]] = {}

        def collect(out: Any) -> None:
            logprobs.setdefault(out.request_id, []).extend(out.logprobs)
            if on_output is not None:
                on_output(out)

        outs = run_to_completion(engine, prompts, params, prefix=prefix, on_output=collect)
        for out in outs:
            out.logprobs = logprobs.get(out.request_id, [])
        return outs

    def assert_same_outputs(self, got: Any, want: Any) -> None:
        """Equal tokens and top-5 log-probabilities within ``logprob_atol`` at every step."""
        assert got.token_ids == want.token_ids
        assert len(got.logprobs) == len(want.logprobs) == len(want.token_ids)
        for g, w in zip(got.logprobs, want.logprobs):
            assert abs(g.logprob - w.logprob) <= self.logprob_atol, (g, w)
            mine, theirs = dict(g.top), dict(w.top)
            both = mine.keys() & theirs.keys()
            assert len(both) >= len(theirs) - 1, (g.top, w.top)  # a near-tie at the last place may swap
            assert all(abs(mine[t] - theirs[t]) <= self.logprob_atol for t in both), (g.top, w.top)

    # -- the suite -------------------------------------------------------------------------------

    def test_family_is_chosen_from_config_not_the_folder_name(self, conformance_checkpoint: Path, tmp_path: Path):
        from anna_core.loading import load_model

        other = "gemma-4-E2B-it" if self.family.startswith("qwen") else "Qwen3.5-9B"  # another family's name
        misleading = tmp_path / other
        misleading.symlink_to(conformance_checkpoint, target_is_directory=True)
        assert load_model(misleading, device="cpu", dtype="fp32").family == self.family
        config = json.loads((conformance_checkpoint / "config.json").read_text())
        assert config.get("model_type") or config.get("architectures"), "config.json names no model_type"

    def test_logits_match_hf_whole_and_chunked(self, conformance_loaded: Any, conformance_hf: Any,
                                               conformance_checkpoint: Path, conformance_prompts: list[list[int]]):
        from anna_core.testing.oracle import hf_reference_logits
        from anna_core.testing.runner import prefill_logits

        prompt = conformance_prompts[0]
        ref = hf_reference_logits(conformance_checkpoint, prompt, model=conformance_hf)
        whole = prefill_logits(conformance_loaded.model, prompt)
        assert whole.shape == ref.shape
        assert relative_error(whole, ref) <= self.logits_tolerance
        chunked = prefill_logits(conformance_loaded.model, prompt, chunk_size=max(1, len(prompt) // 3 + 1))
        assert relative_error(chunked, ref) <= self.logits_tolerance

    def test_llm_greedy_tokens_match_hf(self, conformance_checkpoint: Path, conformance_hf: Any,
                                        conformance_prompts: list[list[int]]):
        from anna_core import LLM, SamplingParams
        from anna_core.testing.oracle import hf_greedy

        llm = LLM(conformance_checkpoint, device="cpu", dtype="fp32", block_size=self.block_size,
                  num_blocks=4 * (2 * self.prompt_length // self.block_size + 8), max_num_seqs=4)
        assert llm.loaded.family == self.family
        prompts = [conformance_prompts[0], conformance_prompts[2]]
        outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=self.greedy_tokens, ignore_eos=True))
        want = [hf_greedy(conformance_checkpoint, p, self.greedy_tokens, model=conformance_hf) for p in prompts]
        assert [o.token_ids for o in outs] == want

    def test_batched_requests_equal_each_alone(self, conformance_loaded: Any, conformance_prompts: list[list[int]]):
        prompts = [conformance_prompts[0], conformance_prompts[2], conformance_prompts[1][: self.prompt_length // 3]]
        batched = self.engine(conformance_loaded, enable_prefix_caching=False)
        outs = self.run(batched, prompts, "b")
        alone = self.engine(conformance_loaded, enable_prefix_caching=False, max_num_seqs=1)
        for i, (prompt, out) in enumerate(zip(prompts, outs)):
            assert out.finish_reason == "length", out.error
            [single] = self.run(alone, [prompt], f"alone{i}-")
            self.assert_same_outputs(out, single)
        assert batched.kv.num_used_blocks == 0 and batched.kv.slots.num_used_slots == 0

    def test_prefix_hit_equals_miss(self, conformance_loaded: Any, conformance_prompts: list[list[int]]):
        first, second = conformance_prompts[0], conformance_prompts[1]
        if len(first) // 2 < self.block_size:
            pytest.fail(f"prompt_length {self.prompt_length} shares fewer than one block ({self.block_size} tokens) "
                        "between the two prompts: raise prompt_length")
        # a recurrent group resumes only from a state snapshot: take one at every block
        cached = self.engine(conformance_loaded, enable_prefix_caching=True, snapshot_interval=self.block_size)
        reference = self.engine(conformance_loaded, enable_prefix_caching=False)
        self.run(cached, [first], "warm")
        [hit] = self.run(cached, [second], "hit")
        [miss] = self.run(reference, [second], "miss")
        shared = len(first) // 2
        assert miss.num_cached_tokens == 0
        assert 0 < hit.num_cached_tokens <= shared, "the shared prefix was not served from the prefix cache"
        self.assert_same_outputs(hit, miss)

    def test_chunked_prefill_equals_one_pass(self, conformance_loaded: Any, conformance_prompts: list[list[int]]):
        prompt = conformance_prompts[0]
        whole = self.engine(conformance_loaded, enable_prefix_caching=False)
        chunk = max(self.block_size, len(prompt) // 3)
        chunked = self.engine(conformance_loaded, enable_prefix_caching=False, max_prefill_tokens=chunk,
                              prefill_chunk_size=chunk - 3)
        [a] = self.run(whole, [prompt], "whole")
        [b] = self.run(chunked, [prompt], "chunked")
        self.assert_same_outputs(b, a)

    def test_every_cache_group_gives_back_what_it_held(self, conformance_loaded: Any,
                                                       conformance_prompts: list[list[int]]):
        from anna_core.cache_spec import SlidingWindowSpec

        spec = conformance_loaded.model.cache_spec
        assert spec.groups, "the model declares no cache group"
        eng = self.engine(conformance_loaded, enable_prefix_caching=False)
        sliding = [g for g, s in enumerate(spec.groups) if isinstance(s, SlidingWindowSpec)]
        held: dict[int, list[int]] = {g: [] for g in sliding}

        def watch(out: Any) -> None:
            if not out.finished:
                for g in sliding:
                    held[g].append(eng.kv.groups[g].num_held("long0"))

        new = 3 * self.prompt_length
        for g in sliding:  # without outgrowing the window the bound below would hold without any release
            bound = -(-spec.groups[g].window // self.block_size) + 1
            if self.prompt_length + new <= (bound + 1) * self.block_size:
                pytest.fail(f"sliding group {g} (window {spec.groups[g].window}) is never outgrown by "
                            f"{self.prompt_length + new} tokens: raise prompt_length above a third of "
                            f"{(bound + 1) * self.block_size}")
        [out] = self.run(eng, [conformance_prompts[0]], "long", max_tokens=new, on_output=watch)
        assert len(out.token_ids) == new
        for g in sliding:
            bound = -(-spec.groups[g].window // self.block_size) + 1
            assert held[g] and max(held[g]) <= bound, f"sliding group {g} held {max(held[g])} blocks > {bound}"
        assert eng.kv.num_used_blocks == 0 and eng.kv.slots.num_used_slots == 0

    def test_chat_through_the_http_app_streamed_and_not(self, conformance_loaded: Any):
        if not self.chat:
            pytest.skip(f"{type(self).__name__}.chat is False: the checkpoint's tokenizer has no chat template")
        tokenizer = conformance_loaded.tokenizer
        if tokenizer is None:
            pytest.fail("the loaded checkpoint has no tokenizer (set chat = False to skip the server test)")
        from litestar.testing import TestClient

        from anna_core.engine.config import EngineConfig
        from anna_core.server.app import create_app
        from anna_core.server.state import ServerState
        from anna_core.tasks.generate import build, start

        engine = build(conformance_loaded, EngineConfig(max_num_seqs=4, max_model_len=256,
                                                        block_size=self.block_size, num_blocks=128))
        client = start(engine)
        body = {"model": "conformance", "max_tokens": 8, "temperature": 0,
                "messages": [{"role": "user", "content": "Hello, how are you?"}]}
        try:
            state = ServerState(model_name="conformance")
            state.set_ready(client, tokenizer, max_model_len=engine.max_model_len, eos_token_ids=[],
                            info={"family": conformance_loaded.family, "device": "cpu", "dtype": "float32"})
            with TestClient(create_app(state)) as http:
                plain = http.post("/v1/chat/completions", json=body)
                assert plain.status_code == 200, plain.text
                message = plain.json()["choices"][0]["message"]
                with http.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as streamed:
                    assert streamed.status_code == 200
                    events = [line[6:] for line in streamed.iter_lines() if line.startswith("data: ")]
                assert events[-1] == "[DONE]"
                chunks = [json.loads(e) for e in events[:-1]]
                text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
                reasoning = "".join(c["choices"][0]["delta"].get("reasoning_content") or ""
                                    for c in chunks if c["choices"])
                assert text == (message.get("content") or "")
                assert reasoning == (message.get("reasoning_content") or "")
                usage = plain.json()["usage"]
            # the server templated the chat as the tokenizer does and decoded greedily (no output parser here)
            prompt = tokenizer.encode(tokenizer.apply_chat_template(body["messages"], add_generation_prompt=True))
            assert usage["prompt_tokens"] == len(prompt)
            from anna_core.engine.sampling_params import SamplingParams
            from anna_core.testing.engine_run import run_to_completion

            [greedy] = run_to_completion(self.engine(conformance_loaded), [prompt],
                                         SamplingParams(temperature=0.0, max_tokens=8), prefix="chat")
            assert usage["completion_tokens"] == len(greedy.token_ids) >= 1
            assert (message.get("reasoning_content") or "") + (message.get("content") or "") == tokenizer.decode(
                greedy.token_ids)
        finally:
            import asyncio

            asyncio.run(client.shutdown(drain=False))

    def test_parsers_on_scripted_streams(self, conformance_loaded: Any):
        from functools import partial

        from anna_core.parsers.loading import parser_factory
        from anna_core.plugins import model_families
        from anna_core.testing.parser_streams import check_sample

        specs = [s for s in model_families() if s.name == self.family]
        if not specs:
            pytest.fail(f"no registered model family is named {self.family!r}")
        spec = specs[0]
        if not (spec.reasoning_parser or spec.tool_call_parser):
            pytest.skip(f"the {self.family!r} family declares no reasoning or tool-call parser")
        declared = ", ".join(f"{kind} {name!r}" for kind, name in (("reasoning parser", spec.reasoning_parser),
                                                                      ("tool-call parser", spec.tool_call_parser))
                             if name)
        if not self.parser_samples:
            pytest.fail(f"the {self.family!r} family declares the {declared}, but {type(self).__name__}.parser_samples "
                        "is empty: declare completions as the family's models write them, with what the parsers must "
                        "make of them (anna_core.testing.parser_streams.ParserSample(output=..., reasoning=..., "
                        "content=..., tool_calls=..., prompt=..., tools=...))")
        tokenizer = conformance_loaded.tokenizer  # the factories get what the server gives them
        make_reasoning = (partial(parser_factory("reasoning", spec.reasoning_parser), tokenizer)
                          if spec.reasoning_parser else None)
        make_tool = partial(parser_factory("tool_call", spec.tool_call_parser), tokenizer) if spec.tool_call_parser \
            else None
        for i, sample in enumerate(self.parser_samples):
            if not isinstance(sample, ParserSample):
                pytest.fail(f"{type(self).__name__}.parser_samples[{i}] is a {type(sample).__name__}, not a ParserSample")
            check_sample(sample, reasoning=make_reasoning, tool=make_tool, tokenizer=tokenizer,
                         random_splits=self.parser_random_splits,
                         label=f"parser_samples[{i}]" + (f" ({sample.name})" if sample.name else ""))
