"""The engine's :class:`~anna_core.engine.step_broadcast.StepBroadcaster` hooks (what tensor parallelism's rank 0
tells the other ranks), over the fake model: the agreed block counts size the pools, every step with work is
announced before its restores and forward pass, and every state copy after the step that produced it."""

from anna_core.engine.config import EngineConfig
from anna_core.engine.llm_engine import LLMEngine
from anna_core.engine.sampling_params import SamplingParams
from anna_core.engine.step_broadcast import StepBroadcaster
from anna_core.testing.engine_run import run_to_completion

from ._engine_fakes import FakeLM, greedy_reference

V = 101
GREEDY = SamplingParams(temperature=0.0, max_tokens=4)
CONFIG = dict(block_size=4, num_blocks=512, max_num_seqs=4, max_prefill_tokens=96, snapshot_interval=8)


class Recorder(StepBroadcaster):
    """Records each hook's call; agrees on ``cap`` blocks per group at most."""

    def __init__(self, cap: int):
        self.cap = cap
        self.calls: list[tuple] = []

    def agree_num_blocks(self, num_blocks):
        self.calls.append(("blocks", list(num_blocks)))
        return [min(n, self.cap) for n in num_blocks]

    def before_step(self, out):
        self.calls.append(("step", [s.request_id for s in out.seqs], [h.request_id for h in out.prompt_hits]))

    def before_capture(self, captures):
        self.calls.append(("capture", sorted({(c.kind, c.request_id) for c in captures})))


def test_the_agreed_block_counts_size_the_pools():
    recorder = Recorder(cap=100)
    eng = LLMEngine(FakeLM(V), config=EngineConfig(**CONFIG), broadcaster=recorder)
    assert recorder.calls == [("blocks", [512])]
    assert eng.kv.num_blocks == 100


def test_steps_and_captures_are_announced_in_order():
    recorder = Recorder(cap=512)
    eng = LLMEngine(FakeLM(V), config=EngineConfig(**CONFIG, enable_prefix_caching=True), broadcaster=recorder)
    prompt = [(i * 37 + 11) % V for i in range(20)]
    [out] = run_to_completion(eng, [prompt], GREEDY, prefix="a")
    assert out.token_ids == greedy_reference(prompt, 4, V)
    step, snapshot = ("step", ["a0"], []), ("capture", [("snapshot", "a0")])
    # the fake model takes its 20-token prompt in chunks ending at the snapshot boundaries (8 and 16), each chunk's
    # snapshot copied after it, the prompt-cache entry after the last; then 3 decodes
    assert recorder.calls[1:] == [step, snapshot, step, snapshot, step, ("capture", [("prompt", "a0")])] + [step] * 3
    recorder.calls.clear()
    [again] = run_to_completion(eng, [prompt], GREEDY, prefix="b")
    assert again.token_ids == out.token_ids and again.num_cached_tokens == 20
    # the prompt-cache hit (its state restored, no forward pass), then 3 decodes; nothing new to copy
    assert recorder.calls == [("step", [], ["b0"])] + [("step", ["b0"], [])] * 3
