"""The committed HF fixture of the Gemma 3 270M GGUF (``data/gemma3_270m_hf.json``) is what transformers
gives now: re-runs ``tools/gemma3_hf_fixture.py`` (about 80 s on two cores) into a temporary file.

Opt-in (``ANNA_HF_ORACLE=1``): CI compares Anna with the committed fixture (``test_gemma3_270m_gguf.py``); rerun
this when transformers or the fixture script changes."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from tests.gemma3.real_model import gemma3_270m_gguf

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.environ.get("ANNA_HF_ORACLE") != "1",
                                 reason="reruns HF transformers on the 270M GGUF (about 80 s): set ANNA_HF_ORACLE=1")]

ROOT = Path(__file__).resolve().parents[2]


def test_fixture_is_what_transformers_gives(tmp_path):
    gguf = gemma3_270m_gguf()
    spec = importlib.util.spec_from_file_location("gemma3_hf_fixture", ROOT / "tools" / "gemma3_hf_fixture.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = tmp_path / "fixture.json"
    assert script.main(["--gguf", str(gguf), "--out", str(out)]) == 0
    fresh, committed = json.loads(out.read_text()), json.loads((Path(__file__).parent / "data" / "gemma3_270m_hf.json").read_text())
    for key in ("prompt", "prompt_ids", "greedy", "greedy_text", "layer_types", "sliding_window", "model_class"):
        assert fresh[key] == committed[key], key
    for pos, row in committed["top_logits"].items():
        assert fresh["top_logits"][pos]["ids"] == row["ids"], pos
        assert max(abs(a - b) for a, b in zip(fresh["top_logits"][pos]["logits"], row["logits"])) < 1e-4, pos
