"""The prompt-state seam (``ModelCapabilities.prompt_state``): a model that keeps per-sequence state of its own, set
from a prompt's media, gets ``start_prompts`` (one :class:`~anna_core.engine.forward_batch.PromptStart` per prompt
whose first chunk the step computes: its state slot and media) before the step's forward pass, whatever the path:
eager, a prefill graph's replay (whose captured pass sees no request), a split step; never for a later chunk or a
decode. The capability is declared, not probed; a prompt the model refuses fails its request, not the engine. A model
that declares ``recompute_holds_last`` replays prefill graphs for prompt tokens alone."""

from __future__ import annotations

import attrs
import pytest
from anna_core.engine import model_runner
from anna_core.engine.config import EngineConfig
from anna_core.engine.llm_engine import LLMEngine
from anna_core.engine.model_runner import RunnerConfig
from anna_core.engine.request import Request
from anna_core.engine.sampling_params import SamplingParams
from anna_core.engine.sched_output import ScheduledSeq
from anna_core.errors import AnnaError
from anna_core.model import ModelCapabilities, check_model
from anna_core.testing.fake_graphs import FakeGraphAccelerator
from anna_core.testing.multimodal_model import PLACEHOLDER, MultiModalLM, grid_positions, image

from tests.core._engine_fakes import FakeLM


class PromptStateLM(MultiModalLM):
    """:class:`MultiModalLM` declaring ``prompt_state``; ``events`` records, in order, each ``start_prompts`` call
    (``("start", [(state slot, media), ...])``) and each forward pass (``("forward", padded)``)."""

    def __init__(self) -> None:
        super().__init__(window=8)
        self.capabilities = attrs.evolve(self.capabilities, prompt_state=True)
        self.events: list[tuple[str, object]] = []
        self.refuse: object = None  # media whose prompt start_prompts refuses

    def start_prompts(self, prompts):
        if any(p.media is not None and p.media is self.refuse for p in prompts):
            raise AnnaError("this prompt is refused")
        self.events.append(("start", [(p.state_slot, p.media) for p in prompts]))

    def forward(self, batch, caches):
        self.events.append(("forward", batch.num_valid is not None))
        return super().forward(batch, caches)


def _engine(model, *, graphs: bool = False, **cfg) -> LLMEngine:
    cfg = {"block_size": 4, "num_blocks": 128, "max_num_seqs": 4, "max_prefill_tokens": 64,
           "enable_prefix_caching": False, "prompt_cache_size": 0, "max_model_len": 64, **cfg}
    eng = LLMEngine(model, config=EngineConfig(**cfg))
    if graphs:
        eng.runner.accel = FakeGraphAccelerator()
        eng.runner.setup(RunnerConfig(warmup=False), max_model_len=eng.max_model_len, max_num_seqs=4,
                         max_prefill_tokens=64)
        assert eng.runner.prefill_graphs is not None
    model.events.clear()  # (the captures' passes)
    return eng


def _media_prompt(seed: int):
    prompt = [5, 6, 7] + [PLACEHOLDER] * 6 + [8, 9]
    return prompt, grid_positions(len(prompt), [image(seed, 3, 6)])


def _run(eng: LLMEngine, requests: dict, n: int = 4) -> dict:
    for rid, (prompt, mm) in requests.items():
        eng.add_request(rid, prompt, SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True), multimodal=mm)
    outs = {}
    while eng.has_unfinished():
        for out in eng.step():
            if out.finished:
                outs[out.request_id] = out
    return outs


def _starts(model) -> list[list]:
    return [e[1] for e in model.events if e[0] == "start"]


def test_prompts_start_once_before_the_eager_pass_that_computes_their_first_chunk():
    model = PromptStateLM()
    eng = _engine(model, max_prefill_tokens=8)  # an 11-token prompt in two chunks
    media, text = _media_prompt(1), ([4, 5, 6], None)
    outs = _run(eng, {"m": media, "t": text})
    assert all(o.error is None for o in outs.values())
    assert outs["m"].token_ids == model.reference_greedy(media[0], 4, media[1])
    starts = [p for call in _starts(model) for p in call]  # each prompt once, though the media prompt ran in chunks
    assert sorted((mm is media[1], mm is None) for _, mm in starts) == [(False, True), (True, False)]
    assert len({slot for slot, _ in starts}) == 2
    for i, event in enumerate(model.events):  # every call right before a forward pass
        assert event[0] == "forward" or model.events[i + 1] == ("forward", False)
    assert len(_starts(model)) == 2 < sum(e[0] == "forward" for e in model.events) - 2  # later chunks, decodes: none
    assert eng.runner.num_prefill_graph_steps == 0


def test_a_prompt_on_a_prefill_graph_starts_before_its_replay(monkeypatch):
    monkeypatch.setattr(model_runner, "prefill_buckets", lambda n: [b for b in (8, 16) if b <= n])
    model = PromptStateLM()
    eng = _engine(model, graphs=True, async_scheduling=True)
    media = _media_prompt(2)
    outs = _run(eng, {"m": media})
    assert outs["m"].token_ids == model.reference_greedy(media[0], 4, media[1])
    assert eng.runner.num_prefill_graph_steps == 1 and eng.runner.num_eager_steps == 0
    [start] = _starts(model)
    assert [mm for _, mm in start] == [media[1]]
    i = model.events.index(("start", start))
    assert model.events[i + 1] == ("forward", True)  # the replay: the padded pass right after it
    two = {"a": _media_prompt(3), "b": _media_prompt(4)}  # one step, split: each prompt replays its graph
    model.events.clear()
    outs = _run(eng, two)
    assert eng.runner.num_prefill_graph_steps == 3 and eng.runner.num_split_steps >= 1
    [start] = _starts(model)
    assert sorted(id(mm) for _, mm in start) == sorted(id(m[1]) for m in two.values())
    assert model.events[1:3] == [("forward", True), ("forward", True)]
    for rid, (prompt, mm) in two.items():
        assert outs[rid].token_ids == model.reference_greedy(prompt, 4, mm)


def test_a_refused_prompt_fails_its_request_and_the_others_go_on():
    model = PromptStateLM()
    eng = _engine(model)
    bad, good = _media_prompt(5), _media_prompt(6)
    model.refuse = bad[1]
    outs = _run(eng, {"bad": bad})
    assert outs["bad"].finish_reason == "error" and "refused" in outs["bad"].error
    outs = _run(eng, {"good": good})
    assert outs["good"].error is None and outs["good"].token_ids == model.reference_greedy(good[0], 4, good[1])
    assert eng.kv.num_used_blocks == 0


def test_declared_prompt_state_needs_the_method():
    model = FakeLM(101)
    model.capabilities = ModelCapabilities(prompt_state=True)
    with pytest.raises(AnnaError, match="start_prompts"):
        check_model(model)


@pytest.mark.parametrize("holds_last", [False, True])
def test_a_model_holding_its_last_token_replays_prefill_graphs_for_prompt_tokens_alone(monkeypatch, holds_last):
    monkeypatch.setattr(model_runner, "prefill_buckets", lambda n: [b for b in (8, 16) if b <= n])
    model = PromptStateLM()
    eng = _engine(model, graphs=True)
    runner = eng.runner
    model.capabilities = attrs.evolve(model.capabilities, recompute_holds_last=holds_last)
    request = Request("r", [5, 6, 7, 8], SamplingParams(max_tokens=8, temperature=0.0))
    request.output_token_ids = [9, 10]
    prompt_only = ScheduledSeq(request, 0, [5, 6, 7, 8], [[0]] * len(model.cache_spec.groups), 0, True)
    with_generated = ScheduledSeq(request, 0, [5, 6, 7, 8, 9, 10], [[0, 1]] * len(model.cache_spec.groups), 0, True)
    assert runner._prefill_graph_fits(prompt_only)
    assert runner._prefill_graph_fits(with_generated) is not holds_last
