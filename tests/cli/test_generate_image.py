"""``anna generate --image``: a vision-language checkpoint answers about an image file as ``LLM.chat`` does."""

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
