"""The setup the TTS engine checks on a GPU share (``tts_overlap_check.py``, ``tts_prefill_check.py``, which import it
from this folder): the repository root on the import path (``tests.audio``'s golden fixtures and engine helpers), the
device (``DEVICE``, default ``cuda``), the speech task over a tiny golden checkpoint there, and a greedy run of the
golden cases' prompts to their codes that prints the requests that failed. Not a check itself."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from anna_audio.qwen3_tts import SpeechRequest, TalkerPrompt
    from anna_audio.qwen3_tts.talker_lm import TalkerLM
    from anna_core.engine.config import EngineConfig
    from anna_core.engine.llm_engine import LLMEngine
    from anna_core.engine.model_runner import RunnerConfig
    from anna_core.engine.outputs import RequestOutput

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # tests.audio's fixture and engine helpers
DEVICE = os.environ.get("DEVICE", "cuda")


@contextmanager
def speech_engine(kind: str, engine: EngineConfig, runner: RunnerConfig) -> Iterator[tuple[LLMEngine, TalkerLM]]:
    """``(engine, model)`` of the speech task (``anna_audio.speech.task.build`` with the ``engine`` and ``runner``
    configurations) over the tiny ``kind`` checkpoint on :data:`DEVICE` in
    float32, its code predictor greedy; the vocoder closed and the device's cached memory released on leaving."""
    from anna_audio.qwen3_tts.generate import GREEDY
    from anna_audio.speech import task
    from anna_core.loading import load_model

    from tests.audio.tts_golden import CHECKPOINTS

    loaded = load_model(CHECKPOINTS[kind], device=DEVICE, dtype="float32")
    loaded.model.predictor_sampling = GREEDY  # before the graphs capture the code predictor's choice
    built = task.build(loaded, engine, runner)
    try:
        yield built.engine, loaded.model
    finally:
        built.vocoder.close()
        del built, loaded
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def golden_prompts(model: TalkerLM, jobs: list[tuple[str, int, SpeechRequest]]) -> dict[str, TalkerPrompt]:
    """``{"<case>/<row>": TalkerPrompt}`` of ``(case, row, request)`` jobs (``tests.audio.tts_golden.speech_requests``)
    built by ``model``'s talker parts."""
    from tests.audio.tts_engine import talker_prompts
    from tests.audio.tts_golden import TalkerParts

    return talker_prompts(TalkerParts(model.config, model.talker, model.predictor), jobs)


def greedy_codes(engine: LLMEngine, model: TalkerLM, prompts: dict[str, TalkerPrompt],
                 label: str) -> tuple[dict[str, torch.Tensor], bool]:
    """``({request id: codes [F, G] on the CPU}, whether a request failed)``: ``prompts`` submitted at once (the
    golden greedy sampling) and ``engine`` stepped to the end; each failed request printed as
    ``<label>: <request id> failed: <error>``."""
    from tests.audio.tts_engine import generate_codes

    failed = []

    def report(out: RequestOutput) -> None:
        if out.finish_reason == "error":
            print(f"{label}: {out.request_id} failed: {out.error}")
            failed.append(out.request_id)

    return generate_codes(engine, model, prompts, check=report), bool(failed)
