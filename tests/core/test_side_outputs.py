"""The engine's side-output seam (``ModelCapabilities.side_outputs``): a model's per-sequence value of each step
reaches ``RequestOutput.side_outputs`` with the token it belongs to, survives coalescing, and is declared, not
probed; ``ForwardBatch.media`` carries each sequence's media to the model."""

from __future__ import annotations

import attrs
import pytest
import torch
from anna_core.engine.config import EngineConfig
from anna_core.engine.llm_engine import LLMEngine
from anna_core.engine.outputs import RequestOutput, coalesce
from anna_core.engine.sampling_params import SamplingParams
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

    def side_output(self, state_slot: int) -> int:
        return int(self.sums[state_slot])


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
    with pytest.raises(AnnaError, match="side_output"):
        check_model(model)
