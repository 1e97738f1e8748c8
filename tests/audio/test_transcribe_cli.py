"""``anna transcribe``: the route's bodies for each ``--format``, a text model refused in one line, a bad upload an
``error:`` line (no traceback)."""

from __future__ import annotations

import json

import numpy as np
from anna_cli.main import build_cli
from click.testing import CliRunner

from tests.audio.test_transcribe_server import RATE, wav


def test_transcribe_formats_and_refusals(tiny_checkpoint, tmp_path):
    model = tiny_checkpoint("qwen3_asr")
    audio = tmp_path / "a.wav"
    samples = (0.2 * np.random.default_rng(0).standard_normal(RATE)).astype(np.float32)
    audio.write_bytes(wav(samples))
    cli = build_cli()
    base = ["transcribe", "--model-dir", str(model), "--audio", str(audio), "--language", "en"]
    as_json = CliRunner().invoke(cli, [*base, "--format", "json"])
    assert as_json.exit_code == 0, as_json.output
    text = json.loads(as_json.stdout)["text"]
    plain = CliRunner().invoke(cli, [*base, "--format", "text"])
    assert plain.stdout == text + "\n"
    vtt = CliRunner().invoke(cli, [*base, "--format", "vtt"])
    assert vtt.stdout == f"WEBVTT\n\n00:00:00.000 --> 00:00:01.000\n{text.strip()}\n"
    verbose = json.loads(CliRunner().invoke(cli, [*base, "--format", "verbose_json"]).stdout)
    assert verbose["duration"] == 1.0 and verbose["language"] == "english" and verbose["text"] == text

    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"not audio at all")
    result = CliRunner().invoke(cli, ["transcribe", "--model-dir", str(model), "--audio", str(bad)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.stderr.strip().splitlines()[-1].startswith(f"error: {bad}: audio refused")

    text_model = tiny_checkpoint("qwen3")
    result = CliRunner().invoke(cli, ["transcribe", "--model-dir", str(text_model), "--audio", str(audio)])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines()[-1] == "error: the 'qwen3' family serves the task(s) generate, not 'transcribe'"
