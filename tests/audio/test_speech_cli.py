"""``anna speak``: a WAV at the model's rate and of whole 80 ms frames (exactly ``--max-frames`` of them when EOS
cannot come first), other formats by suffix, refusals as one ``error:`` line (no traceback)."""

from __future__ import annotations

import pytest
import soundfile
from anna_cli.main import build_cli
from click.testing import CliRunner

from tests.audio.tts_golden import CHECKPOINTS, golden

pytestmark = pytest.mark.slow  # starts a server or loads models (seconds each)

MODEL = str(CHECKPOINTS["custom_voice"])


def test_speak_writes_audio_and_refuses_cleanly(tmp_path, tiny_checkpoint):
    cli = build_cli()
    out = tmp_path / "out.wav"
    base = ["speak", "--model-dir", MODEL, "--input", "Hello, world!", "--voice", "serena", "--seed", "3"]
    result = CliRunner().invoke(cli, [*base, "--output", str(out), "--max-frames", "6"])
    assert result.exit_code == 0, result.output
    info = soundfile.info(str(out))
    assert info.samplerate == 24000 and info.channels == 1 and info.subtype == "PCM_16"
    assert 0 < info.frames <= 6 * 1920 and info.frames % 1920 == 0

    flac = tmp_path / "out.flac"
    assert CliRunner().invoke(cli, [*base, "--output", str(flac), "--max-frames", "3"]).exit_code == 0
    assert soundfile.info(str(flac)).samplerate == 24000

    result = CliRunner().invoke(cli, [*base, "--output", str(tmp_path / "x.aac")])
    assert result.exit_code == 2 and "suffix must be one of" in result.output

    ref = tmp_path / "ref.wav"
    ref.write_bytes(out.read_bytes())
    result = CliRunner().invoke(cli, [*base, "--output", str(out), "--ref-audio", str(ref), "--ref-text", "Hi"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.stderr.strip().splitlines()[-1] == "error: a custom_voice model takes no reference audio"
    result = CliRunner().invoke(cli, ["speak", "--model-dir", str(CHECKPOINTS["base"]), "--input", "Hi", "--output",
                                      str(out), "--ref-audio", str(ref), "--ref-text", "Hi"])
    assert result.exit_code == 1 and "Traceback" not in result.output  # the 0.24-0.48 s output is too short
    assert "voice cloning takes 0.5-60 s" in result.stderr.strip().splitlines()[-1]
    tensors, _ = golden("base")
    recording = tmp_path / "recording.wav"
    soundfile.write(str(recording), tensors["ref/audio"].numpy(), 24000, subtype="FLOAT")
    cloned = tmp_path / "cloned.wav"
    result = CliRunner().invoke(cli, ["speak", "--model-dir", str(CHECKPOINTS["base"]), "--input", "Hi", "--output",
                                      str(cloned), "--ref-audio", str(recording), "--ref-text", "Hi", "--max-frames",
                                      "3"])
    assert result.exit_code == 0, result.output
    info = soundfile.info(str(cloned))
    assert info.samplerate == 24000 and 0 < info.frames <= 3 * 1920

    result = CliRunner().invoke(cli, ["speak", "--model-dir", MODEL, "--input", "Hi", "--voice", "nobody",
                                      "--output", str(out)])
    assert result.exit_code == 1 and "voice 'nobody' is not one of" in result.stderr

    text_model = tiny_checkpoint("qwen3")
    result = CliRunner().invoke(cli, ["speak", "--model-dir", str(text_model), "--input", "Hi", "--output", str(out)])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines()[-1] == "error: the 'qwen3' family serves the task(s) generate, not 'speech'"
