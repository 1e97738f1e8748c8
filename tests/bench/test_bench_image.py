"""``anna bench --image PATH [--image-size WxH]`` on the CPU with the tiny Qwen3.5 vision-language checkpoint:
the timed requests are image chats (their greedy tokens are ``LLM.generate``'s for the same prompt and image)."""

from __future__ import annotations

import json

import pytest
from anna_cli.bench import bench
from click.testing import CliRunner


@pytest.fixture(scope="module")
def tiny_vl(tmp_path_factory):
    from anna_core.testing.checkpoints import build_tiny_qwen35_vl

    return build_tiny_qwen35_vl(tmp_path_factory.mktemp("tiny-vl-bench"))


def run(*args: str):
    res = CliRunner().invoke(bench, ["--device", "cpu", "--dtype", "fp32", "--load-format", "safetensors",
                                     "--output-len", "4", "--warmup", "0", "--runs", "1", "--json", *args])
    return res, (json.loads(res.output[res.output.index("{"):]) if res.exit_code == 0 else None)


def test_a_random_image_of_the_given_size(tiny_vl):
    from anna_core import LLM, SamplingParams
    from anna_core.bench.image_prompts import ImageSpec, image_requests

    res, r = run("--model-dir", str(tiny_vl), "--image-size", "64x48", "--batch-size", "2")
    assert res.exit_code == 0, res.output
    assert r["image"] == {"image": "random 64x48", "image_tokens": 12, "offload_vision": False}  # 8x6 patches / 4
    assert r["ttft_ms"] > 0 and r["prefill_tokens_per_s"] == pytest.approx(2 * r["input_len"] / (r["ttft_ms"] / 1e3))
    assert "served_vs_eager_match_tokens" not in r
    llm = LLM(tiny_vl, device="cpu", dtype="fp32", num_blocks=64, prompt_cache_size=0)
    [ids], [mm] = image_requests(llm.loaded, ImageSpec(size=(64, 48)), 1, 0)  # run 0, request 0
    assert r["input_len"] == len(ids) and sum(m.length for m in mm.items) == 12
    [ref] = llm.generate(ids, SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True), multimodal=mm)
    assert r["first_tokens"] == ref.token_ids


def test_an_image_file_resized_with_offload_vision(tiny_vl, tmp_path):
    from tests.qwen35_vl.conftest import random_image

    random_image(1, 100, 80).save(tmp_path / "a.png")
    res, r = run("--model-dir", str(tiny_vl), "--image", str(tmp_path / "a.png"), "--image-size", "32x32",
                 "--offload-vision")
    assert res.exit_code == 0, res.output
    assert r["image"]["image_tokens"] == 4 and r["image"]["offload_vision"]
    assert str(tmp_path / "a.png") in r["image"]["image"]
    text, _ = run("--model-dir", str(tiny_vl), "--image", str(tmp_path / "a.png"))
    from anna_core.bench.report import format_report

    assert "image tokens per prompt" in format_report(json.loads(text.output[text.output.index("{"):]))


def test_bad_sizes_and_text_models_are_one_line_errors(tiny_vl, tmp_path_factory):
    from anna_core.testing.checkpoints import build_tiny_qwen35

    res, _ = run("--model-dir", str(tiny_vl), "--image-size", "12")
    assert res.exit_code != 0 and "WIDTHxHEIGHT" in res.output
    text = build_tiny_qwen35(tmp_path_factory.mktemp("tiny-text-bench"))
    res, _ = run("--model-dir", str(text), "--image-size", "32x32")
    assert res.exit_code != 0 and "takes no images" in res.output


def test_a_random_video_per_request(tiny_vl):
    from anna_core import LLM, SamplingParams
    from anna_core.bench.video_prompts import VideoSpec, video_requests

    res, r = run("--model-dir", str(tiny_vl), "--video-frames", "4", "--video-size", "48x32")
    assert res.exit_code == 0, res.output
    # 4 frames at 2 fps: 2 frame groups of 6x4 patches of 8, merged 2x2 -> 6 tokens each
    assert r["video"] == {"video": "random 4 frames of 48x32 at 2 fps", "video_tokens": 12, "frame_groups": 2,
                          "offload_vision": False}
    assert "image" not in r and "served_vs_eager_match_tokens" not in r
    llm = LLM(tiny_vl, device="cpu", dtype="fp32", num_blocks=64, prompt_cache_size=0)
    [ids], [mm] = video_requests(llm.loaded, VideoSpec(4, (48, 32)), 1, 0)  # run 0, request 0
    assert r["input_len"] == len(ids)
    [ref] = llm.generate(ids, SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True), multimodal=mm)
    assert r["first_tokens"] == ref.token_ids
    from anna_core.bench.report import format_report

    assert "12 video tokens in 2 frame groups" in format_report(r)


def test_bad_video_flags_are_one_line_errors(tiny_vl):
    for args, needle in ((["--video-frames", "0"], "at least one frame"),
                         (["--video-frames", "4", "--video-size", "x"], "--video-size must be WIDTHxHEIGHT"),
                         (["--video-frames", "4", "--image-size", "32x32"], "not both"),
                         (["--video-frames", "4", "--compare-hf"], "text prompts only")):
        res, _ = run("--model-dir", str(tiny_vl), *args)
        assert res.exit_code == 1 and needle in res.output, res.output
