"""``anna generate --image`` / ``--video``: a vision-language checkpoint answers about an image or a video file as
``LLM.chat`` / ``LLM.generate`` do with the same media."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.cli.test_generate import assert_one_line_error, run


@pytest.fixture(scope="module")
def tiny_vl(tmp_path_factory):
    from anna_core.testing.checkpoints import build_tiny_qwen35_vl

    return build_tiny_qwen35_vl(tmp_path_factory.mktemp("tiny-qwen35-vl-cli"))


@pytest.fixture(scope="module")
def image_file(tmp_path_factory):
    from PIL import Image

    path = tmp_path_factory.mktemp("img") / "noise.png"
    Image.fromarray(np.random.RandomState(7).randint(0, 256, (56, 56, 3), dtype=np.uint8)).save(path)
    return path


def test_generate_with_an_image_equals_llm_chat(tiny_vl, image_file):
    from anna_core import LLM, SamplingParams
    from PIL import Image

    result = run("generate", "--model-dir", str(tiny_vl), "--device", "cpu", "--dtype", "fp32", "--image",
                 str(image_file), "--prompt", "What is this?", "--disable-thinking", "--max-new-tokens", "8",
                 "--temperature", "0", "--json", "--no-cuda-graph")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    llm = LLM(tiny_vl, device="cpu", dtype="fp32", num_blocks=64)
    messages = [{"role": "user", "content": [{"type": "image", "image": Image.open(image_file).convert("RGB")},
                                             {"type": "text", "text": "What is this?"}]}]
    [ref] = llm.chat(messages, SamplingParams(temperature=0.0, max_tokens=8),
                     chat_template_kwargs={"enable_thinking": False})
    assert out["token_ids"] == ref.token_ids
    assert out["usage"]["prompt_tokens"] == len(ref.prompt_token_ids)
    assert ref.prompt_token_ids.count(llm.loaded.processor.image_token_id) == 16


def test_an_image_for_a_text_model_is_a_one_line_error(image_file, tmp_path_factory):
    from anna_core.testing.checkpoints import build_tiny_qwen35

    text = build_tiny_qwen35(tmp_path_factory.mktemp("tiny-text"))
    result = run("generate", "--model-dir", str(text), "--device", "cpu", "--image", str(image_file), "--prompt", "hi")
    assert_one_line_error(result, "text only")


@pytest.fixture(scope="module")
def video_file(tmp_path_factory):
    pytest.importorskip("av")
    from anna_core.testing.video import random_mp4

    path = tmp_path_factory.mktemp("vid") / "noise.mp4"
    path.write_bytes(random_mp4(8, rate=4, seed=5, size=(48, 32)))  # 2 s: 4 frames at the checkpoint's 2 fps
    return path


def _llm_video(tiny_vl, video_file):
    from anna_core import LLM
    from anna_core.media import decode_video

    llm = LLM(tiny_vl, device="cpu", dtype="fp32", num_blocks=64)
    fps, max_frames, frame_pixels = llm.loaded.processor.video_sampling
    video = decode_video(video_file.read_bytes(), fps=fps, max_frames=max_frames, max_frame_pixels=frame_pixels)
    assert len(video.frames) == 4
    return llm, video


def test_generate_with_a_video_equals_llm_generate(tiny_vl, video_file):
    from anna_core import SamplingParams

    prompt = "<|im_start|>user\n<|vision_start|><|video_pad|><|vision_end|>What happens?<|im_end|>\n<|im_start|>assistant\n"
    result = run("generate", "--model-dir", str(tiny_vl), "--device", "cpu", "--dtype", "fp32", "--video",
                 str(video_file), "--raw", "--prompt", prompt, "--max-new-tokens", "8", "--temperature", "0",
                 "--json", "--no-cuda-graph")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    llm, video = _llm_video(tiny_vl, video_file)
    [ref] = llm.generate(prompt, SamplingParams(temperature=0.0, max_tokens=8), media={"video": [video]})
    assert out["token_ids"] == ref.token_ids and len(ref.token_ids) == 8
    assert out["usage"]["prompt_tokens"] == len(ref.prompt_token_ids)
    assert ref.prompt_token_ids.count(llm.loaded.processor.video.video_token_id) == 2 * 6  # two frame groups (4 frames), 48x32 pixels: 6x4 patches, 3x2 merged


def test_generate_chat_with_an_image_and_a_video_equals_llm_chat(tiny_vl, image_file, video_file):
    from anna_core import SamplingParams
    from PIL import Image

    result = run("generate", "--model-dir", str(tiny_vl), "--device", "cpu", "--dtype", "fp32", "--image",
                 str(image_file), "--video", str(video_file), "--prompt", "Compare them.", "--disable-thinking",
                 "--max-new-tokens", "8", "--temperature", "0", "--json", "--no-cuda-graph")
    assert result.exit_code == 0, result.output
    llm, video = _llm_video(tiny_vl, video_file)
    messages = [{"role": "user", "content": [{"type": "image", "image": Image.open(image_file).convert("RGB")},
                                             {"type": "video", "video": video},
                                             {"type": "text", "text": "Compare them."}]}]
    [ref] = llm.chat(messages, SamplingParams(temperature=0.0, max_tokens=8),
                     chat_template_kwargs={"enable_thinking": False})
    assert json.loads(result.stdout)["token_ids"] == ref.token_ids


def test_a_corrupt_video_is_a_one_line_error(tiny_vl, tmp_path):
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"garbage" * 50)
    result = run("generate", "--model-dir", str(tiny_vl), "--device", "cpu", "--video", str(bad), "--prompt", "hi",
                 "--no-cuda-graph")
    assert_one_line_error(result, "cannot decode video")


def test_a_video_for_a_text_model_is_a_one_line_error(video_file, tmp_path_factory):
    from anna_core.testing.checkpoints import build_tiny_qwen35

    text = build_tiny_qwen35(tmp_path_factory.mktemp("tiny-text-v"))
    result = run("generate", "--model-dir", str(text), "--device", "cpu", "--video", str(video_file), "--prompt", "hi")
    assert_one_line_error(result, "text only", "--video")
