"""The vision-language benchmark (``python -m anna_core.bench.vl_bench`` and ``tools/gpu_experiments/vl_bench.sh``) on
the CPU: the tiny Qwen3.5 VL config made into a benchmark folder with random weights, as the GPU run does with the
9B config, with small media."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--device", "cpu", "--dtype", "fp32", "--image-size", "64x64", "--video-frames", "4", "--video-size",
         "64x48", "--runs", "2", "--streams", "2", "--stream-input-len", "16", "--stream-output-len", "96",
         "--image-requests", "2", "--baseline-steps", "4"]


@pytest.fixture(scope="module")
def tiny_vl(tmp_path_factory):
    from anna_core.testing.checkpoints import build_tiny_qwen35_vl

    return build_tiny_qwen35_vl(tmp_path_factory.mktemp("tiny-vl-vlbench"))


@pytest.fixture(scope="module")
def shape_folder(tiny_vl, tmp_path_factory):
    from anna_core.testing.checkpoints import write_vl_shape_folder

    return write_vl_shape_folder(tiny_vl, tmp_path_factory.mktemp("vl-shape"), image_pixels=(256, 16384),
                                 video_pixels=(256, 65536))


def test_the_shape_folder_takes_images_and_videos(shape_folder):
    from anna_core.loading import load_model

    config = json.loads((shape_folder / "config.json").read_text())
    loaded = load_model(shape_folder, device="cpu", dtype="fp32", load_format="dummy")
    assert loaded.processor.modalities == ("image", "video")
    assert loaded.tokenizer.encode("<|image_pad|>", add_special_tokens=False) == [config["image_token_id"]]
    assert loaded.processor.video_sampling == (2.0, 768, 65536)
    assert not list((shape_folder).glob("*.safetensors"))


def test_every_measurement_on_the_cpu(shape_folder, tmp_path, capsys):
    from anna_core.bench.vl_bench import main

    assert main(["--model-dir", str(shape_folder), *SMALL, "--out", str(tmp_path / "r.json")]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split(" ")[0] for line in lines] == ["vl_bench", "image", "video", "text", "decode", "HF"]
    r = json.loads((tmp_path / "r.json").read_text())
    img, vid, beside, hf = r["image_ttft"], r["video_ttft"], r["beside"], r["hf"]
    assert img["media_tokens"] == 16 and img["media_items"] == 1  # 64x64: 8x8 patches of 8, merged 2x2
    assert len(img["ttft_ms_all"]) == 2 and img["ttft_ms"] > 0 and img["encoder_ms"] > 0
    assert vid["media_items"] == 2 and vid["media_tokens"] == 2 * 12  # 4 frames: 2 groups of 8x6 patches / 4
    assert beside["steps_during"] >= 2 and beside["itl_ms_during_max"] > 0 and beside["itl_ms_alone_mean"] > 0
    assert beside["rounds"] == 2 and beside["image_ttft_ms_p50"] > 0
    assert hf["first_token_equal"] and hf["ttft_ms"] > 0  # the same float32 weights and pixels: the same token
    assert hf["speedup"] == pytest.approx(hf["ttft_ms"] / img["ttft_ms"])
    text = r["text_ttft"]
    assert text["prompt_tokens"] == img["prompt_tokens"] and len(text["ttft_ms_all"]) == 2 and text["ttft_ms"] > 0
    assert f"image TTFT {img['ttft_ms']:.1f} ms" in lines[1]


def test_the_gpu_script_runs_on_the_cpu_and_fails_loudly(tiny_vl, tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "CONFIG": str(tiny_vl), "T_VL": "300",
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "VL_FLAGS": " ".join([*SMALL, "--skip-hf", "--image-size", "256x256"])}
    res = subprocess.run(["bash", "tools/gpu_experiments/vl_bench.sh"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout.splitlines()
    assert [line.split(" ")[0] for line in out] == ["vl_bench", "image", "video", "text", "decode", "vl_bench"]
    assert "256 image tokens" in out[1]  # the released pixel bounds: 256x256 stays, 32x32 patches of 8 / 4
    assert json.loads((tmp_path / "vl_bench.json").read_text())["image_ttft"]["media_tokens"] == 256
    bad = subprocess.run(["bash", "tools/gpu_experiments/vl_bench.sh"], cwd=ROOT, capture_output=True, text=True,
                         env={**env, "VL_FLAGS": "--runs 0"}, timeout=600)
    assert bad.returncode != 0 and "FAILED" in bad.stdout and "runs must be at least 1" in bad.stdout


@pytest.mark.parametrize(("flags", "code", "message"), [
    (["--runs", "0"], 2, "runs must be at least 1, got 0"),
    (["--image-requests", "-1"], 2, "image_requests must be at least 1, got -1"),
    (["--model-dir", "/nonexistent/anna-vl"], 2, "--model-dir '/nonexistent/anna-vl' is not a folder"),
    (["--model-dir", "TEXT"], 1, "is not a vision-language model taking images and videos (this qwen35 model takes "
                                 "text only)"),
])
def test_usage_errors_are_one_line_and_exit_codes(shape_folder, tmp_path_factory, capsys, flags, code, message):
    from anna_core.bench.vl_bench import main
    from anna_core.testing.checkpoints import build_tiny_qwen35

    if "TEXT" in flags:
        text_model = tmp_path_factory.mktemp("tiny-text")
        build_tiny_qwen35(text_model)
        flags = ["--model-dir", str(text_model)]
    argv = ["--model-dir", str(shape_folder), *SMALL, "--skip-hf", *flags]
    capsys.readouterr()  # the fixtures' output
    assert main(argv) == code
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and message in captured.err, captured.err
    assert captured.err.startswith("python -m anna_core.bench.vl_bench: error: ")


@pytest.mark.parametrize(("speedup", "words"), [(2.5, "Anna 2.50x faster"), (1.0, "Anna 1.00x faster"),
                                                (0.1333, "Anna 7.50x slower"), (0.5, "Anna 2.00x slower")])
def test_hf_line_says_faster_or_slower(speedup, words):
    from anna_core.bench.vl_bench import format_lines

    report = {"model": "m", "device_name": "cpu", "dtype": "float32", "load_s": 1.0, "setup_s": 1.0,
              "hf": {"ttft_ms": 10.0, "ttft_ms_all": [10.0], "transformers": "5", "fla": False, "speedup": speedup,
                     "first_token_equal": True}}
    line = format_lines(report)[-1]
    assert f"): {words}; first token equal: yes" in line, line
