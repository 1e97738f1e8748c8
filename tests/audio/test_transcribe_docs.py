"""docs/openai-compatibility.md documents every form field the transcription route reads."""

import re
from pathlib import Path

from anna_audio.transcribe.request import KNOWN_FIELDS

DOC = Path(__file__).resolve().parents[2] / "docs" / "openai-compatibility.md"


def test_every_form_field_is_in_the_table():
    text = DOC.read_text()
    start = text.index("## Transcriptions request (`POST /v1/audio/transcriptions`)")
    end = text.find("\n## ", start + 1)
    documented = set(re.findall(r"^\| `([^`]+)` \|", text[start:end], flags=re.MULTILINE))
    assert set(KNOWN_FIELDS) == documented
