"""The tiny Qwen3-TTS talker on Anna's engine, shared by the engine tests of ``tests/audio`` and the TTS GPU checks of
``tools/gpu_experiments``: a :class:`~anna_audio.qwen3_tts.talker_lm.TalkerLM` over a checkpoint's talker parts on the
CPU op table, its ``LLMEngine`` (no prefix or prompt cache), its steps captured on
:class:`~anna_core.testing.fake_graphs.FakeGraphAccelerator`, the golden cases' prompts, and a run of prompts to
their tokens and codes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from anna_audio.qwen3_tts import SpeechRequest, TalkerPrompt, build_prompt
from anna_audio.qwen3_tts.engine_requests import (
    EngineSpeechRequest,
    FrameAssembler,
    TalkerParams,
    engine_request,
    talker_params,
)
from anna_audio.qwen3_tts.generate import GREEDY
from anna_audio.qwen3_tts.sampling import SpeechSampling
from anna_audio.qwen3_tts.talker_lm import TalkerLM
from anna_core.engine.config import EngineConfig
from anna_core.engine.llm_engine import LLMEngine
from anna_core.engine.model_runner import RunnerConfig
from anna_core.engine.outputs import RequestOutput
from anna_core.kernels.registry import KernelRegistry, bind_ops
from anna_core.testing.fake_graphs import FakeGraphAccelerator

from tests.audio.tts_golden import TalkerParts

SAMPLING = SpeechSampling(talker=GREEDY, predictor=GREEDY, repetition_penalty=1.05, max_new_tokens=24)
"""The reference's generation of the golden codes: greedy, repetition penalty 1.05, at most 24 frames."""


def talker_model(parts: TalkerParts, slots: int, ops: Any = None) -> TalkerLM:
    """The engine's talker over ``parts`` (the code predictor greedy), ``slots`` state slots reserved; ``ops``: its op
    table (None: the installed plugins' float32 CPU ops)."""
    config, talker, predictor = parts
    ops = bind_ops(KernelRegistry.from_plugins(), "cpu", torch.float32) if ops is None else ops
    model = TalkerLM(config, talker, predictor, ops, predictor_sampling=GREEDY)
    model.reserve_slots(slots)
    return model


def new_engine(model: TalkerLM, max_num_seqs: int, **config: Any) -> LLMEngine:
    """An engine over ``model`` without prefix or prompt caches; ``config``: further ``EngineConfig`` fields (64 KV
    blocks unless it says otherwise)."""
    return LLMEngine(model, config=EngineConfig(max_num_seqs=max_num_seqs, enable_prefix_caching=False,
                                                prompt_cache_size=0, **{"num_blocks": 64, **config}),
                     eos_token_ids=[model.eos_token_id])


def capture_graphs(engine: LLMEngine, max_num_seqs: int) -> FakeGraphAccelerator:
    """Put ``engine``'s runner on a fresh fake graph accelerator and capture its graphs (``RunnerConfig`` defaults: no
    warm-up); the accelerator, whose ``replays`` count the graph launches."""
    accel = FakeGraphAccelerator()
    engine.runner.accel = accel
    engine.runner.setup(RunnerConfig(cuda_graph=True, warmup=False), max_model_len=engine.max_model_len,
                        max_num_seqs=max_num_seqs)
    return accel


def talker_engine(parts: TalkerParts, max_num_seqs: int = 8, *, graphs: bool = False,
                  **config: Any) -> tuple[TalkerLM, LLMEngine]:
    """``(model, engine)``: :func:`talker_model` with ``max_num_seqs`` slots and :func:`new_engine` over it
    (``config`` as there), its steps captured (:func:`capture_graphs`) with ``graphs``, else every step eager."""
    model = talker_model(parts, max_num_seqs)
    engine = new_engine(model, max_num_seqs, **config)
    if graphs:
        capture_graphs(engine, max_num_seqs)
    return model, engine


def talker_prompts(parts: TalkerParts, jobs: list[tuple[str, int, SpeechRequest]]) -> dict[str, TalkerPrompt]:
    """``{"<case>/<row>": TalkerPrompt}`` of ``(case, row, request)`` jobs (``tts_golden.speech_requests``), in
    order."""
    with torch.inference_mode():
        return {f"{case}/{row}": build_prompt(parts.config, parts.talker, parts.predictor, request)
                for case, row, request in jobs}


def submit(engine: LLMEngine, model: TalkerLM, request_id: str, prompt: TalkerPrompt,
           params: TalkerParams | None = None) -> EngineSpeechRequest:
    """Add ``prompt`` to ``engine`` as request ``request_id`` (``params``: greedy :data:`SAMPLING` unless given);
    the engine request added."""
    r = engine_request(prompt, model.placeholder_id, talker_params(SAMPLING) if params is None else params)
    engine.add_request(request_id, r.prompt_ids, r.params, multimodal=r.multimodal)
    return r


def no_error(out: RequestOutput) -> None:
    """The default check of :func:`generate`: fails the test at an output that finished with an error."""
    assert out.finish_reason != "error", out.error


def generate(engine: LLMEngine, model: TalkerLM, prompts: dict[str, TalkerPrompt],
             params_of: Callable[[int], TalkerParams] | None = None, *,
             check: Callable[[RequestOutput], None] = no_error) -> dict[str, tuple[list[int], torch.Tensor]]:
    """Submit ``{request id: TalkerPrompt}`` at once, the ``i``-th with ``params_of(i)`` (greedy :data:`SAMPLING`
    unless given), and step ``engine`` to the end, handing every output to ``check`` first:
    ``{request id: (tokens, codes [F, G] int64)}`` (``tokens``: every token the engine reported, the last one
    included, which never becomes a frame)."""
    frames, tokens = {}, {}
    for i, (rid, prompt) in enumerate(prompts.items()):
        submit(engine, model, rid, prompt, None if params_of is None else params_of(i))
        frames[rid], tokens[rid] = FrameAssembler(), []
    while engine.has_unfinished():
        for out in engine.step():
            check(out)
            frames[out.request_id].feed(out)
            tokens[out.request_id] += out.delta_token_ids
    groups = model.config.talker.num_code_groups
    return {rid: (tokens[rid], frames[rid].codes(groups)) for rid in prompts}


def generate_codes(engine: LLMEngine, model: TalkerLM, prompts: dict[str, TalkerPrompt],
                   params_of: Callable[[int], TalkerParams] | None = None, *,
                   check: Callable[[RequestOutput], None] = no_error) -> dict[str, torch.Tensor]:
    """:func:`generate`'s codes alone: ``{request id: codes [F, G] int64}``."""
    return {rid: codes for rid, (_, codes) in generate(engine, model, prompts, params_of, check=check).items()}
