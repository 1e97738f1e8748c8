"""``python -m anna_audio.bench`` on the CPU with the tiny checkpoint and small numbers: every request yields
exactly the fixed output tokens (EOS ignored) on both sides, and the report's figures are consistent."""

import pytest
from anna_audio.bench import run_bench


def test_bench_cpu_path(tiny_checkpoint):
    model = tiny_checkpoint("qwen3_asr")
    report = run_bench(model, device="cpu", clip_seconds=1.0, tokens_per_second=3.0, concurrency=(1, 2), hf=True,
                       warmup=True)  # warm-up runs at each concurrency first; their tokens are not counted
    assert report["output_tokens_per_request"] == 3
    for run in report["anna"].values():  # one step for the prefill and the first token, one per further token
        assert run["steps"] == 3 and run["encode_device_s"] > 0 and run["engine_s"] <= run["wall_s"]
    for side in ("anna", "hf"):
        one, two = report[side]["1"], report[side]["2"]
        assert (one["requests"], one["output_tokens"], two["requests"], two["output_tokens"]) == (1, 3, 2, 6)
        assert one["rtf"] == pytest.approx(one["wall_s"] / 1.0) and two["rtf"] is None
        assert two["audio_s"] == 2.0 and two["audio_s_per_s"] == pytest.approx(2.0 / two["wall_s"])


def test_bench_refuses_bad_numbers(tiny_checkpoint):
    with pytest.raises(ValueError):
        run_bench(tiny_checkpoint("qwen3_asr"), device="cpu", clip_seconds=0)


def test_bench_runs_on_a_config_only_folder(tiny_checkpoint, tmp_path):
    """The GPU benchmark's folder holds only ``config.json`` (dummy weights, no tokenizer): the task still builds."""
    folder = tmp_path / "shape"
    folder.mkdir()
    (folder / "config.json").write_text((tiny_checkpoint("qwen3_asr") / "config.json").read_text())
    report = run_bench(folder, load_format="dummy", device="cpu", clip_seconds=1.0, tokens_per_second=2.0,
                       concurrency=(2,), warmup=False)
    assert report["anna"]["2"]["output_tokens"] == 4 and report["hf"] == {}
