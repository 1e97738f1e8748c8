"""The committed Qwen3-TTS golden fixtures (``tests/audio/fixtures/qwen3_tts/``), made by the upstream reference
code with ``tools/tts_fixtures/make_qwen3_tts_fixtures.py``; tests that read them skip, naming that script, when
they are absent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "qwen3_tts"
CHECKPOINTS = {"base": FIXTURES / "tiny-base", "custom_voice": FIXTURES / "tiny-custom-voice",
               "voice_design": FIXTURES / "tiny-voice-design"}
SCRIPT = "tools/tts_fixtures/make_qwen3_tts_fixtures.py"


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
