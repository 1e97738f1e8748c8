"""``python -m anna_audio.tts_bench`` on the CPU with the tiny CustomVoice shape (random weights): every streamed
response holds exactly the fixed frames and the report's figures are consistent; the 1.7B shape folder parses."""

import pytest
from anna_audio.qwen3_tts import load_config
from anna_audio.tts_bench import FRAME_S, run_bench, write_shape_folder

from tests.audio.tts_golden import CHECKPOINTS

pytestmark = pytest.mark.slow  # starts a server or loads models (seconds each)


def test_bench_cpu_path():
    report = run_bench(CHECKPOINTS["custom_voice"], load_format="dummy", device="cpu", frames=6, concurrency=2,
                       runs=1, chunk_frames=(1, 4))
    one, crowd = report["one"], report["concurrent"]
    assert report["frames"] == 6 and report["audio_s"] == pytest.approx(6 * FRAME_S)
    assert one["runs"][0]["bytes"] == 6 * 1920 * 2 and one["rtf"] == pytest.approx(one["latency_s"] / (6 * FRAME_S))
    assert 0 < one["first_audio_s"] < one["latency_s"]
    assert crowd["requests"] == 2 and crowd["latency_vs_one"] == pytest.approx(crowd["latency_s"]["mean"]
                                                                               / one["latency_s"])
    assert report["chunk_frames"] == [1, 4] and report["vocoder_calls"] >= 2
    split = report["split"]  # on the CPU: no graphs, the predictor and vocoder timed eagerly
    assert not split["graphs"]["captured"] and "cpu device" in split["graphs"]["why_not"] and split["step_ms"] == {}
    assert set(split["predictor_ms"]) == set(split["vocoder_ms_per_frame"]) == {1, 2}
    assert all(v > 0 for v in [*split["predictor_ms"].values(), *split["vocoder_ms_per_frame"].values()])
    with pytest.raises(ValueError):
        run_bench(CHECKPOINTS["custom_voice"], device="cpu", frames=0)


def test_shape_folder_of_the_released_size(tmp_path):
    config = load_config(write_shape_folder("Qwen3-TTS-12Hz-1.7B-Base", tmp_path / "m"))
    assert config.kind == "base" and config.talker.shape.hidden_size == 2048
    assert config.talker.num_code_groups == 16 and config.codec.decoder.samples_per_frame == 1920
