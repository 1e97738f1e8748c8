"""The engine's side-output seam (``ModelCapabilities.side_outputs``): a model's per-sequence value of each step
reaches ``RequestOutput.side_outputs`` with the token it belongs to, survives coalescing, and is declared, not
probed; ``ForwardBatch.media`` carries each sequence's media to the model. A model that declares
``recompute_holds_last`` gets its side outputs back in ``ForwardBatch.side_outputs`` and is never asked to recompute
its last generated token in one pass with the token before it: a preempted request recomputes up to it, gets it
back without a second output, and decodes it next. Under asynchronous scheduling the side outputs travel with a
launched step's ids, and a request preempted with its newest token pending drops it and holds the one before."""

from __future__ import annotations

import attrs
import pytest
import torch
from anna_core.engine.config import EngineConfig
from anna_core.engine.llm_engine import LLMEngine
from anna_core.engine.outputs import RequestOutput, coalesce
from anna_core.engine.request import Request, RequestStatus
from anna_core.engine.sampling_params import SamplingParams
from anna_core.engine.sched_output import ModelRunnerOutput, StepPath
from anna_core.errors import AnnaError
from anna_core.model import ModelCapabilities, check_model

from tests.core._engine_fakes import FakeLM, greedy_reference

V = 101


class SideLM(FakeLM):
    """FakeLM that leaves, per state slot, the sum of the tokens its last step computed for that sequence, and
    records the media each step saw."""

    def __init__(self) -> None:
        super().__init__(V)
        self.capabilities = attrs.evolve(self.capabilities, side_outputs=True)
        self.sums = torch.zeros(16, dtype=torch.int64)
        self.media_seen: list[list] = []

    def forward(self, batch, caches):
        out = super().forward(batch, caches)
        self.media_seen.append(list(batch.media))
        cu = batch.cu_seqlens.tolist()
        for i in range(batch.num_seqs):
            self.sums[int(batch.state_slots[i])] = int(batch.input_ids[cu[i]:cu[i + 1]].sum())
        return out

    def gather_side_outputs(self, state_slots: torch.Tensor) -> torch.Tensor:
        return self.sums.index_select(0, state_slots)


def test_each_output_carries_the_step_s_side_output():
    model = SideLM()
    eng = LLMEngine(model, config=EngineConfig(block_size=4, num_blocks=64, max_num_seqs=4))
    prompts = {"a": [5, 7, 9], "b": [1, 2]}
    for rid, ids in prompts.items():
        eng.add_request(rid, ids, SamplingParams(max_tokens=4, temperature=0.0))
    seen: dict[str, list[tuple[list[int], list]]] = {rid: [] for rid in prompts}
    while eng.has_unfinished():
        for out in eng.step():
            seen[out.request_id].append((out.delta_token_ids, out.side_outputs))
    for rid, ids in prompts.items():
        tokens = greedy_reference(ids, 4, V)
        # the step that sampled output k computed the prompt (k = 0) or token k - 1
        assert [s for _, s in seen[rid]] == [[sum(ids)]] + [[t] for t in tokens[:-1]]
        assert [d for d, _ in seen[rid]] == [[t] for t in tokens]
    assert all(m == [None] * len(m) for m in model.media_seen)  # text requests: no media


def test_coalesce_joins_side_outputs():
    a = RequestOutput("r", [1], delta_token_ids=[3], side_outputs=["x"])
    b = RequestOutput("r", [1], delta_token_ids=[4], side_outputs=["y"])
    assert coalesce(a, b).side_outputs == ["x", "y"]


def test_declared_side_outputs_need_the_method():
    model = FakeLM(V)
    model.capabilities = ModelCapabilities(side_outputs=True)
    with pytest.raises(AnnaError, match="gather_side_outputs"):
        check_model(model)


class HoldLM(SideLM):
    """SideLM that declares ``recompute_holds_last`` and checks, every pass, the contract such a model relies on
    (prompts of ``prompt_len`` tokens): a generated token ``k`` computed behind another row of its chunk (a
    recompute) finds its side output in ``batch.side_outputs`` (entry ``k + 1``), which for SideLM is the token
    itself (the sum of its one-row decode)."""

    def __init__(self, prompt_len: int) -> None:
        super().__init__()
        self.capabilities = attrs.evolve(self.capabilities, recompute_holds_last=True)
        self.prompt_len = prompt_len
        self.replayed = 0

    def forward(self, batch, caches):
        cu = batch.cu_seqlens.tolist()
        for i, q in enumerate(batch.query_lens):
            side, first_pos = batch.side_outputs[i], batch.context_lens[i] - q
            for pos in range(max(first_pos + 1, self.prompt_len), first_pos + q):
                k = pos - self.prompt_len
                if k + 1 >= len(side):
                    raise RuntimeError(f"generated token {k} recomputed in one pass with the token before it")
                if side[k + 1] != int(batch.input_ids[cu[i] + pos - first_pos]):
                    raise RuntimeError(f"the side output of generated token {k} is out of place")
                self.replayed += 1
        return super().forward(batch, caches)


def test_a_held_last_token_is_recomputed_up_to_and_decoded_once():
    prompts = {"a": [5, 7, 9, 11, 2, 4], "b": [1, 2] * 3, "c": [3] * 6, "d": [8, 1, 6] * 2}
    model = HoldLM(prompt_len=6)
    eng = LLMEngine(model, config=EngineConfig(block_size=4, num_blocks=10, max_num_seqs=4, max_prefill_tokens=16))
    for rid, ids in prompts.items():
        eng.add_request(rid, ids, SamplingParams(max_tokens=14, temperature=0.0))
    seen: dict[str, tuple[list[int], list]] = {rid: ([], []) for rid in prompts}
    held = []
    while eng.has_unfinished():
        for out in eng.step():
            assert out.finish_reason != "error", out.error
            seen[out.request_id][0].extend(out.delta_token_ids)
            seen[out.request_id][1].extend(out.side_outputs)
        held += [r.held_token for r in eng.scheduler.waiting if r.held_token is not None]
    assert eng.scheduler.num_preemptions > 0 and held and model.replayed > 0
    for rid, ids in prompts.items():
        tokens, side = seen[rid]
        assert tokens == greedy_reference(ids, 14, V), rid  # every token reported once, none lost
        assert side[1:] == tokens[:-1], rid  # output k's side output: the decode of token k - 1
    assert eng.kv.num_used_blocks == 0 and eng.kv.slots.num_used_slots == 0


def test_a_request_finished_while_its_token_is_held_keeps_it():
    model = HoldLM(prompt_len=3)
    eng = LLMEngine(model, config=EngineConfig(block_size=4, num_blocks=16, max_num_seqs=2))
    eng.add_request("r", [4, 5, 6], SamplingParams(max_tokens=8, temperature=0.0))
    for _ in range(3):
        eng.step()
    request = eng.scheduler.running[0]
    tokens = list(request.output_token_ids)
    eng.scheduler.preempt(request)
    assert request.held_token == tokens[-1] and request.output_token_ids == tokens[:-1]
    out = eng.abort_request("r")
    assert out.token_ids == tokens and request.held_token is None


def test_a_held_token_is_put_back_when_the_recompute_reaches_it():
    """The scheduler alone: the recompute's last chunk does not sample; its update restores the token."""
    model = HoldLM(prompt_len=2)
    eng = LLMEngine(model, config=EngineConfig(block_size=4, num_blocks=16, max_num_seqs=2))
    sched = eng.scheduler
    request = Request("r", [1, 2], SamplingParams(max_tokens=8, temperature=0.0))
    request.output_token_ids = [7, 9, 11]
    request.status = RequestStatus.RUNNING
    sched.add(request)
    out = sched.schedule()  # admitted: computes 1, 2, 7, 9, 11 (no hold: never preempted)
    assert out.seqs[0].samples and out.seqs[0].token_ids == [1, 2, 7, 9, 11]
    sched.update(out, ModelRunnerOutput(StepPath.EAGER, sampled={"r": 13}))
    sched.preempt(request)
    assert request.held_token == 13 and request.output_token_ids == [7, 9, 11]
    out = sched.schedule()
    assert not out.seqs[0].samples and out.seqs[0].token_ids == [1, 2, 7, 9, 11]
    grew = sched.update(out, ModelRunnerOutput(StepPath.EAGER))
    assert grew == [] and request.held_token is None and request.output_token_ids == [7, 9, 11, 13]
    out = sched.schedule()  # the held token decodes next
    assert out.seqs[0].samples and out.seqs[0].token_ids == [13] and out.seqs[0].start == 5


def test_a_request_preempted_with_a_pending_token_drops_it_and_holds_the_one_before():
    """Asynchronous scheduling: the newest token of a request preempted while its step is in flight is still pending;
    a model that holds its last token drops it (computed again after the recompute) and holds the one before, and the
    step in flight's read-back skips the request."""
    from anna_core.engine.inflight import Inflight
    from anna_core.engine.request import PENDING

    model = HoldLM(prompt_len=2)
    eng = LLMEngine(model, config=EngineConfig(block_size=4, num_blocks=16, max_num_seqs=2))
    sched = eng.scheduler
    request = Request("r", [1, 2], SamplingParams(max_tokens=8, temperature=0.0))
    other = Request("o", [3, 4], SamplingParams(max_tokens=8, temperature=0.0))
    for r in (request, other):
        sched.add(r)
    sched.update(sched.schedule(), ModelRunnerOutput(StepPath.EAGER, sampled={"r": 7, "o": 5}))
    request.output_token_ids.append(9)
    for r in (request, other):
        r.output_token_ids.append(PENDING)  # a launched step's placeholders
    inflight = Inflight(None, [request, other], {"r": 0, "o": 1})
    sched.preempt(request)
    assert request.held_token == 9 and request.output_token_ids == [7]
    assert inflight.live() == [other]
    inflight.fill(inflight.live(), [11, 13], [torch.tensor(1), torch.tensor(2)])
    assert other.output_token_ids == [5, 13] and other.side_outputs == [torch.tensor(2)] and request.side_outputs == []


def test_pending_ids_carry_the_step_s_side_outputs_as_copies():
    """The read-back buffers of a launched decode step: the ids and each row's side output, which stay as read when the
    alternating host buffers are reused by later steps."""
    from anna_core.device import Accelerator
    from anna_core.engine.graph_staging import IdsReadback

    readback = IdsReadback(Accelerator(torch.device("cpu")), rows=4)
    first = readback.start(torch.tensor([3, 4]), torch.tensor([[1, 2], [3, 4]]))
    second = readback.start(torch.tensor([5]), torch.tensor([[5, 6]]))
    assert first.tolist() == [3, 4] and [r.tolist() for r in first.side_outputs()] == [[1, 2], [3, 4]]
    rows = second.side_outputs()
    third = readback.start(torch.tensor([7]), torch.tensor([[7, 8]]))
    readback.start(torch.tensor([9]), torch.tensor([[9, 9]]))  # reuses second's buffers
    assert [r.tolist() for r in rows] == [[5, 6]] and [r.tolist() for r in third.side_outputs()] == [[7, 8]]
    assert readback.start(torch.tensor([1])).side_outputs() is None
