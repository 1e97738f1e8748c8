"""The engine with images on a tiny Qwen3.5 vision-language checkpoint: prefix caching keyed by the images,
chunked prefill, images batched with text, each reply equal to HF ``generate``'s."""

from __future__ import annotations

import pytest
from anna_core import LLM, SamplingParams
from anna_core.errors import InvalidRequestError
from anna_core.testing.oracle import hf_greedy_inputs

from tests.qwen35_vl.conftest import hf_inputs, random_image, solid_image

N = 12
GREEDY = SamplingParams(temperature=0.0, max_tokens=N, ignore_eos=True)
# text, an image's 16 placeholder tokens (56x56 -> 8x8 patches -> 4x4 rows) from index 6, then text: blocks of 4
TEXT = ("<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|> describe this picture in detail please"
        "<|im_end|>\n<|im_start|>assistant\n")
TEXT_ONLY = "<|im_start|>user\nHello, how are you today?<|im_end|>\n<|im_start|>assistant\n"
IMAGES = {"noise": lambda: random_image(1, 56, 56), "red": lambda: solid_image((255, 0, 0), 56, 56),
          "noise3": lambda: random_image(3, 56, 56), "noise4": lambda: random_image(4, 56, 56),
          "blue": lambda: solid_image((0, 0, 255), 56, 56)}
"""56x56 images by name (the tiny tower maps random noise of any seed to nearly the same rows: the colours
differ more)."""


def image(name):
    return {"image": [IMAGES[name]()]}


def llm(path, **cfg):
    cfg = {"block_size": 4, "num_blocks": 256, "max_num_seqs": 4, "prompt_cache_size": 0, "snapshot_interval": 4,
           **cfg}
    return LLM(path, device="cpu", dtype="fp32", **cfg)


@pytest.fixture(scope="module")
def hf_tokens(hf_vl, tiny_vl):
    """HF's greedy tokens for TEXT with the image of each name (None: TEXT_ONLY, no image)."""
    cache = {}

    def get(name):
        if name not in cache:
            inputs = hf_inputs(tiny_vl, TEXT_ONLY, []) if name is None else hf_inputs(tiny_vl, TEXT, image(name)["image"])
            cache[name] = hf_greedy_inputs(hf_vl, inputs, N)
        return cache[name]

    return get


def test_different_images_behind_the_same_text_share_no_image_block(tiny_vl, hf_tokens):
    engine = llm(tiny_vl)
    [a] = engine.generate(TEXT, GREEDY, media=image("noise"))
    [b] = engine.generate(TEXT, GREEDY, media=image("red"))
    assert a.prompt_token_ids == b.prompt_token_ids  # identical text and placeholders
    image_start = a.prompt_token_ids.index(engine.loaded.processor.image_token_id)
    assert b.num_cached_tokens <= image_start // 4 * 4  # at most the text blocks before the image
    assert a.token_ids == hf_tokens("noise") and b.token_ids == hf_tokens("red")
    assert a.token_ids != b.token_ids
    [again] = engine.generate(TEXT, GREEDY, media=image("noise"))
    assert again.num_cached_tokens > image_start + 16  # the same image: its blocks and the text after them hit
    assert again.token_ids == a.token_ids
    encoder = engine.engine.stats()["encoder"]  # /healthz: the prefix hit covered the image, so no third encode
    assert encoder["media_encoded"] == 2 and encoder["rows_encoded"] == 32 and encoder["encode_host_s"] > 0 and encoder["encode_device_s"] > 0
    assert encoder["outputs_held"] == 0 and encoder["cache_tokens_used"] == 0 and encoder["cache_tokens_total"] > 0


@pytest.mark.parametrize("chunk", [3, 8])
def test_a_chunked_prefill_gives_hf_tokens(tiny_vl, hf_tokens, chunk):
    engine = llm(tiny_vl, enable_prefix_caching=False, prefill_chunk_size=chunk)
    [out] = engine.generate(TEXT, GREEDY, media=image("red"))
    assert out.token_ids == hf_tokens("red")
    assert engine.engine.runner.encoder.outputs == {}  # released once the prefill read it


def test_images_batched_with_text_each_give_hf_tokens(tiny_vl, hf_tokens):
    engine = llm(tiny_vl, max_prefill_tokens=24)
    prompts = [TEXT, TEXT_ONLY, TEXT]
    outs = engine.generate(prompts, GREEDY, media=[image("blue"), None, image("noise")])
    assert [o.token_ids for o in outs] == [hf_tokens("blue"), hf_tokens(None), hf_tokens("noise")]


def test_placeholders_must_match_the_images(tiny_vl):
    engine = llm(tiny_vl)
    with pytest.raises(InvalidRequestError, match="1 image placeholders .* for 2 images"):
        engine.generate(TEXT, GREEDY, media={"image": [random_image(1, 56, 56), random_image(2, 56, 56)]})
    with pytest.raises(InvalidRequestError, match="0 image placeholders"):
        engine.generate(TEXT_ONLY, GREEDY, media={"image": [random_image(1, 56, 56)]})
    with pytest.raises(InvalidRequestError, match="0 video placeholders"):
        engine.generate(TEXT, GREEDY, media={"image": [random_image(1, 56, 56)], "video": [[random_image(1, 56, 56)]]})
    with pytest.raises(InvalidRequestError, match="not audio"):
        engine.generate(TEXT, GREEDY, media={"audio": [b"RIFF"]})
    with pytest.raises(InvalidRequestError, match="aspect ratio"):
        engine.generate(TEXT, GREEDY, media={"image": [random_image(1, 2, 500)]})
    assert not engine.engine.has_unfinished()


def test_a_text_only_model_refuses_media(anna_tiny_qwen35):
    engine = llm(anna_tiny_qwen35)
    assert engine.loaded.processor is None
    with pytest.raises(InvalidRequestError, match="text only"):
        engine.generate("hi", GREEDY, media={"image": [random_image(1, 56, 56)]})
    with pytest.raises(InvalidRequestError, match="text only"):
        engine.chat([{"role": "user", "content": [{"type": "image", "image": random_image(1, 56, 56)}]}], GREEDY)


def test_pixel_bounds_per_request(tiny_vl, hf_vl):
    engine = llm(tiny_vl)
    noise = IMAGES["noise"]()
    [small] = engine.generate(TEXT, GREEDY, media={"image": [noise]}, mm_processor_kwargs={"max_pixels": 32 * 32})
    image_id = engine.loaded.processor.image_token_id
    assert small.prompt_token_ids.count(image_id) == 4  # 32x32 pixels: 4x4 patches of 8, merged 2x2
    inputs = hf_inputs(tiny_vl, TEXT, [noise], size={"shortest_edge": 256, "longest_edge": 32 * 32})
    assert small.prompt_token_ids == inputs["input_ids"][0].tolist()
    assert small.token_ids == hf_greedy_inputs(hf_vl, inputs, N)
    [default] = engine.generate(TEXT, GREEDY, media={"image": [noise]})
    assert default.prompt_token_ids.count(image_id) == 16
    for bad, needle in [({"max_pixels": 0}, "positive"), ({"fps": "2"}, "positive number"), ({"seconds": 2}, "not supported"),
                        ({"min_pixels": 4096, "max_pixels": 1024}, "exceeds")]:
        with pytest.raises(InvalidRequestError, match=needle):
            engine.generate(TEXT, GREEDY, media={"image": [noise]}, mm_processor_kwargs=bad)


def test_chat_with_image_parts(tiny_vl, hf_tokens):
    engine = llm(tiny_vl)
    red = IMAGES["red"]()
    messages = [{"role": "user", "content": [{"type": "image", "image": red},
                                             {"type": "text", "text": " describe this picture in detail please"}]}]
    [out] = engine.chat(messages, GREEDY, chat_template_kwargs={"enable_thinking": False})
    text = engine.tokenizer.apply_chat_template([{"role": "user", "content": [
        {"type": "image"}, {"type": "text", "text": " describe this picture in detail please"}]}],
        add_generation_prompt=True, enable_thinking=False)
    [direct] = engine.generate(text, GREEDY, media={"image": [red]})
    assert out.prompt_token_ids == direct.prompt_token_ids and out.token_ids == direct.token_ids
    assert engine.loaded.processor.image_token_id in out.prompt_token_ids
