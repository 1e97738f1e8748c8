"""The committed Qwen3-TTS golden fixtures (``tests/audio/fixtures/qwen3_tts/``), made by the upstream reference
code with ``tools/tts_fixtures/make_qwen3_tts_fixtures.py``; tests that read them skip, naming that script, when
they are absent. Also the golden cases as speech requests, and a tiny checkpoint's talker and code predictor."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import torch
from anna_audio.qwen3_tts import CodePredictor, Qwen3TTSConfig, SpeechRequest, Talker

FIXTURES = Path(__file__).parent / "fixtures" / "qwen3_tts"
CHECKPOINTS = {"base": FIXTURES / "tiny-base", "custom_voice": FIXTURES / "tiny-custom-voice",
               "voice_design": FIXTURES / "tiny-voice-design"}
KINDS = list(CHECKPOINTS)
"""The checkpoint kinds: Base (voice cloning), CustomVoice (named speakers), VoiceDesign (instructions)."""
SCRIPT = "tools/tts_fixtures/make_qwen3_tts_fixtures.py"
WAVE_ATOL = 1e-4
"""The largest difference (in samples of [-1, 1]) allowed between a waveform and the reference's golden one."""


def require(name: str) -> Path:
    """``golden/<name>.safetensors``, or skip the test when the fixtures were not generated."""
    path = FIXTURES / "golden" / f"{name}.safetensors"
    if not path.is_file():
        pytest.skip(f"Qwen3-TTS golden fixtures absent ({path}); generate them with {SCRIPT} "
                    f"(tools/tts_fixtures/README.md)")
    return path


def golden(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(tensors, facts)`` of ``golden/<name>.*`` (skips when absent)."""
    from safetensors.torch import load_file

    path = require(name)
    return load_file(str(path)), json.loads(path.with_suffix(".json").read_text())


def cases(tensors: dict[str, Any]) -> list[tuple[str, str]]:
    """``(case, row)`` of every generated code sequence in a kind's golden tensors."""
    return sorted((key.split("/")[0], key.rsplit("/", 1)[1]) for key in tensors if "/codes/" in key)


def golden_codes(tensors: dict[str, Any], request_id: str) -> torch.Tensor:
    """``[F, G]`` int64: the reference's codes of the request ``"<case>/<row>"`` (anything after a further ``/`` is
    ignored: a tag such as ``"/alone"``)."""
    case, row = request_id.split("/")[:2]
    return tensors[f"{case}/codes/{row}"]


def speech_requests(cases: dict[str, Any], tensors: dict[str, Any]) -> list[tuple[str, int, SpeechRequest]]:
    """``(case, row, request)`` for every row of every case of a kind's golden ``facts["cases"]`` (the cloning cases'
    x-vector, reference ids and codes taken from ``tensors``)."""
    out = []
    for case, c in cases.items():
        if not isinstance(c, dict) or "text" not in c:
            continue
        for row in range(len(c["text"])):
            mode = c.get("mode", [None] * len(c["text"]))[row]
            instruct = c.get("instruct_ids", [None] * len(c["text"]))[row]
            out.append((case, row, SpeechRequest(
                assistant_ids=torch.tensor(c["input_ids"][row]), language=c["language"][row],
                speaker=c.get("speaker", [None] * len(c["text"]))[row],
                instruct_ids=None if instruct is None else torch.tensor(instruct),
                speaker_embedding=tensors["ref/speaker_embedding"] if mode else None,
                ref_ids=torch.tensor(cases["ref_text_ids"]) if mode == "icl" else None,
                ref_codes=tensors["ref/codes"] if mode == "icl" else None,
                non_streaming_text=c["non_streaming_mode"])))
    return out


class TalkerParts(NamedTuple):
    """A checkpoint's configuration, plain talker and code predictor (what ``build_prompt`` and the engine's
    ``TalkerLM`` take)."""

    config: Qwen3TTSConfig
    talker: Talker
    predictor: CodePredictor


def talker_parts(name: str) -> TalkerParts:
    """The tiny ``name`` checkpoint's (a :data:`CHECKPOINTS` key) talker parts, float32 on the CPU."""
    from anna_audio.qwen3_tts import load_code_predictor, load_config, load_talker

    folder = CHECKPOINTS[name]
    config = load_config(folder)
    return TalkerParts(config, load_talker(folder, config), load_code_predictor(folder, config))
