"""The conformance suites of plugins: one base class a plugin's own tests subclass. :class:`FamilyConformance`
for a model family (below); :class:`KernelConformance` for a kernel plugin (every implementation it registers
against the op's torch reference, on the op contract's sample inputs its probe accepts).

A family plugin proves in its own repository that it behaves like every family Anna serves::

    # tests/test_conformance.py of the plugin
    from anna_core.testing.conformance import FamilyConformance

    class TestMyFamilyConformance(FamilyConformance):
        family = "my_family"           # the ModelFamilySpec.name the loader must report

        def build_checkpoint(self, path):
            ...  # save a tiny random transformers model (and a tokenizer with a chat template) to path

pytest collects the subclass (its name starts with ``Test``) and runs every ``test_*`` method below
against the checkpoint, built once per class. HF transformers loading the same folder is the numerical
oracle (:mod:`anna_core.testing.oracle`), so a family that transformers implements needs nothing else.

What it checks (each a method; a subclass may tighten a tolerance or skip one with a reason):

* the family is chosen from ``config.json``, not from the folder's name;
* float32 logits over a prompt within ``logits_tolerance`` (relative to the logits' range) of HF's, whole
  and prefilled in chunks;
* ``greedy_tokens`` greedy tokens through the :class:`~anna_core.LLM` API equal HF ``generate``'s;
* through the engine: batched requests equal each alone, a prefix-cache hit gives the tokens and the
  top log-probabilities of a miss, chunked prefill equals one pass;
* every declared cache group gives back all it held when the requests end, and a sliding-window group
  holds a bounded number of blocks per sequence over a long generation;
* chat completions through the real HTTP app (in-process, no socket), streamed and not, give the same
  text, and the text and token counts of greedy decoding of the tokenizer's chat-templated prompt.

Tolerances: logits are compared as ``max |a - b| / (max(b) - min(b))``; the engine comparisons of top
log-probabilities use ``logprob_atol`` (GEMMs over more rows round differently even in float32).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """``max |a - b|`` over ``b``'s value range (float32); 0 when both are empty."""
    a, b = a.float(), b.float()
    if b.numel() == 0:
        return 0.0
    span = float(b.max() - b.min()) or 1.0
    return float((a - b).abs().max()) / span


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


KERNEL_TOLERANCES: dict[str, float] = {"float32": 1e-4, "float16": 2e-3, "bfloat16": 2e-2}
"""Default bound of :func:`relative_error` between an implementation and the reference, per activation dtype
(float32: summation order only; bfloat16: a rounding at one ulp, e.g. Triton's interpreter rounds float32 ->
bfloat16 toward zero, and attention probabilities rounded to bfloat16 before ``P @ V``)."""


def _plugin_manager(plugin: Any) -> tuple[Any, Any]:
    """``(pm, the plugin's object in it)``: every installed plugin (so the ops of family plugins are known), with
    ``plugin`` (an entry-point name, or a plugin object: a module or instance holding hookimpls) registered."""
    from anna_core.plugins import make_plugin_manager

    pm = make_plugin_manager()
    if isinstance(plugin, str):
        target = pm.get_plugin(plugin)
        if target is None:
            names = sorted(name for name, _ in pm.list_name_plugin())
            raise LookupError(f"no installed anna plugin is named {plugin!r} (installed: {names})")
        return pm, target
    if not pm.is_registered(plugin):
        pm.register(plugin, name=getattr(plugin, "__name__", None) or f"conformance-{id(plugin)}")
    return pm, plugin


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _clone_result(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (tuple, list)):
        return type(value)(_clone_result(v) for v in value)
    return value


def _compare(where: str, got: Any, want: Any, bound: float) -> None:
    """``got`` equals ``want``: tensors of one shape and dtype, floats within ``bound`` of
    :func:`relative_error` (NaN where and only where the reference has one), others exactly; tuples item by
    item; anything else by ``==``."""
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{where}: got {type(got).__name__}, want a tensor"
        assert got.shape == want.shape, f"{where}: shape {tuple(got.shape)}, want {tuple(want.shape)}"
        assert got.dtype == want.dtype, f"{where}: dtype {got.dtype}, want {want.dtype}"
        got, want = got.cpu(), want.cpu()
        if not want.is_floating_point():
            assert torch.equal(got, want), f"{where}: {got.tolist()} != {want.tolist()}"
            return
        nan = want.isnan()
        assert torch.equal(got.isnan(), nan), f"{where}: NaN where the reference has none, or none where it has"
        err = relative_error(got[~nan], want[~nan])
        assert err <= bound, f"{where}: relative error {err:.3g} > {bound:.3g} (max |diff| over the reference's range)"
    elif isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want), f"{where}: got {got!r}, want {len(want)} items"
        for i, (g, w) in enumerate(zip(got, want)):
            _compare(f"{where}[{i}]", g, w, bound)
    else:
        assert got == want, f"{where}: got {got!r}, want {want!r}"


class KernelConformance:
    """Base class of a kernel plugin's conformance tests: every implementation it registers against the op's
    torch reference, on the op's sample inputs (``OpContract.examples``) its probe accepts.

    A kernel plugin runs it from its own tests with one subclass::

        from anna_core.testing.conformance import KernelConformance

        class TestMyKernelsConformance(KernelConformance):
            plugin = "my_kernels"          # the entry-point name (or the plugin object itself)
            device = "cuda"

    pytest makes one test per (implementation, dtype), ``test_implementation_matches_reference[rms_norm:triton-
    float32]``: for every example of the op it asks the implementation's probe about ``(device, dtype,
    example.shape)`` and, where it accepts, runs the implementation and the reference on equal fresh inputs
    (each from its own call of the deterministic examples builder) and compares the results and every tensor
    argument afterwards (so what an op writes in place, state pools and caches, is compared too, and an input
    it must not write is caught). An implementation whose probe declines every example on this device and
    dtype, or that declares other devices (``KernelSpec.devices``), is skipped, with the reason.
    ``test_registers_checkable_implementations`` fails when the plugin registers none, or one of an op whose
    contract declares no examples.

    Class attributes a subclass sets:
        plugin: entry-point name of the plugin (``[project.entry-points.anna]``) or a plugin object (a module
            or instance holding ``@hookimpl`` functions; registered for the suite). Required.
        device: the device type to run on (default ``"cpu"``).
        dtypes: activation dtypes to run (default ``("float32", "bfloat16")``).
        tolerances: ``{dtype: bound}`` of :func:`relative_error` (default :data:`KERNEL_TOLERANCES`).
        op_tolerances: ``{op: {dtype: bound}}`` overriding ``tolerances`` for some ops.
        environment: environment variables set while the plugin registers its kernels and while the probes and
            implementations run (e.g. a switch that lets them run under an interpreter on the CPU).
    """

    plugin: ClassVar[Any] = ""
    device: ClassVar[str] = "cpu"
    dtypes: ClassVar[tuple[str, ...]] = ("float32", "bfloat16")
    tolerances: ClassVar[dict[str, float]] = KERNEL_TOLERANCES
    op_tolerances: ClassVar[dict[str, dict[str, float]]] = {}
    environment: ClassVar[dict[str, str]] = {}

    # -- what the plugin registers ---------------------------------------------------------------

    @classmethod
    def plugin_kernels(cls) -> tuple[dict[str, Any], list[Any]]:
        """``({op: contract}, [the plugin's KernelSpec, ...])``: every registered op contract (the plugin's own
        and every installed plugin's) and the implementations this plugin registers."""
        from anna_core.plugins import op_contracts

        if not cls.plugin:
            raise TypeError(f"{cls.__name__} must set the class attribute `plugin`")
        with _environment(cls.environment):  # a plugin may register by it (e.g. the devices it declares)
            pm, target = _plugin_manager(cls.plugin)
            others = [p for p in pm.get_plugins() if p is not target]
            specs: list[Any] = []
            pm.subset_hook_caller("register_kernels", remove_plugins=others)(register=specs.append)
            return {c.name: c for c in op_contracts(pm)}, specs

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "kernel_case" not in metafunc.fixturenames:
            return
        _, specs = self.plugin_kernels()
        cases = [(spec, dtype) for spec in specs for dtype in self.dtypes]
        metafunc.parametrize("kernel_case", cases, ids=[f"{s.op}:{s.name}-{d}" for s, d in cases])

    @pytest.fixture(autouse=True)
    def conformance_environment(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for name, value in self.environment.items():
            monkeypatch.setenv(name, value)

    def bound(self, op: str, dtype: str) -> float:
        """The :func:`relative_error` bound of ``op`` at ``dtype``."""
        return self.op_tolerances.get(op, {}).get(dtype, self.tolerances[dtype])

    # -- the check -------------------------------------------------------------------------------

    def check_implementation(self, spec: Any, contract: Any, dtype: str) -> int:
        """Run ``spec`` (a ``KernelSpec``) and ``contract``'s reference on every example its probe accepts at
        ``(self.device, dtype)``; return how many ran.

        Raises:
            AssertionError: a result or an argument written in place differs from the reference's beyond
                :meth:`bound`, or the implementation raised on an example its probe accepted.
        """
        from anna_core.kernels.registry import ProbeRequest
        from anna_core.registry import resolve

        build = resolve(contract.examples)
        probe = resolve(spec.probe) if spec.probe else None
        reference, impl = resolve(contract.reference), resolve(spec.impl)
        ran = 0
        if not spec.serves(self.device):
            return ran
        torch_dtype = getattr(torch, dtype)
        for i, example in enumerate(build(self.device, torch_dtype)):
            if probe is not None and not probe(ProbeRequest(self.device, dtype, dict(example.shape))):
                continue
            where = f"{spec.op}:{spec.name} {self.device}/{dtype} example {i} (shape facts {example.shape})"
            want_args = build(self.device, torch_dtype)[i]
            want = _clone_result(reference(*want_args.args, **want_args.kwargs))
            try:
                got = _clone_result(impl(*example.args, **example.kwargs))
            except Exception as exc:  # noqa: BLE001 -- an accepted example must run
                raise AssertionError(f"{where}: raised {type(exc).__name__}: {exc}") from exc
            bound = self.bound(spec.op, dtype)
            _compare(f"{where}: result", got, want, bound)
            names = contract.parameters
            for j, (g, w) in enumerate(zip(example.args, want_args.args)):
                if isinstance(w, torch.Tensor):
                    name = names[j] if j < len(names) else f"argument {j}"
                    _compare(f"{where}: {name} after the call", g, w, bound)
            ran += 1
        return ran

    # -- the suite -------------------------------------------------------------------------------

    def test_registers_checkable_implementations(self) -> None:
        contracts, specs = self.plugin_kernels()
        assert specs, f"plugin {self.plugin!r} registers no kernel implementations (register_kernels)"
        bare = sorted({s.op for s in specs if contracts[s.op].examples is None})
        assert not bare, (f"ops without sample inputs (OpContract.examples), so their implementations cannot be "
                          f"checked: {bare}")
        for op in sorted({s.op for s in specs}):
            contract = contracts[op]
            from anna_core.registry import resolve

            first, second = (resolve(contract.examples)(self.device, getattr(torch, self.dtypes[0])) for _ in range(2))
            assert first, f"op {op!r}: its examples builder returned no examples"
            for a, b in zip(first, second):
                unknown = sorted(set(a.shape) - set(contract.shape_facts))
                assert not unknown, f"op {op!r}: example shape facts {unknown} are not among its shape_facts"
                _compare(f"op {op!r}: examples built twice", list(a.args), list(b.args), 0.0)

    def test_implementation_matches_reference(self, kernel_case: tuple[Any, str]) -> None:
        spec, dtype = kernel_case
        contracts, _ = self.plugin_kernels()
        if contracts[spec.op].examples is None:
            pytest.fail(f"op {spec.op!r} declares no examples (OpContract.examples)")
        if not spec.serves(self.device):
            pytest.skip(f"{spec.op}:{spec.name} runs on {', '.join(spec.devices or ())}, not {self.device}")
        if not self.check_implementation(spec, contracts[spec.op], dtype):
            pytest.skip(f"{spec.op}:{spec.name}'s probe declines every example on {self.device}/{dtype}")
