"""``--offload-vision`` / ``LLM(offload_vision=True)``: the vision tower loads into host memory with CPU-bound ops and
encodes there; replies are unchanged; ``anna serve`` / ``anna generate`` accept the flag; a family that does not
declare vision offload is refused it."""

from __future__ import annotations

import json

import pytest
import torch
from anna_core import LLM, SamplingParams

from tests.qwen35_vl.conftest import PROMPT_ONE, random_image

GREEDY = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)


def llm(path, **kwargs) -> LLM:
    return LLM(path, device="cpu", dtype="fp32", block_size=8, num_blocks=64, max_num_seqs=2, prompt_cache_size=0,
               **kwargs)


def test_the_tower_stays_on_the_cpu_with_cpu_ops_and_replies_are_unchanged(tiny_vl):
    from anna_core.layers.linear import Linear

    offloaded = llm(tiny_vl, offload_vision=True)
    tower = offloaded.loaded.model.visual
    assert {p.device.type for p in tower.parameters()} == {"cpu"}
    linears = [m for m in tower.modules() if isinstance(m, Linear)]
    assert linears and {m.ops.device_type for m in linears} == {"cpu"}
    video = [random_image(30 + i, 40, 56) for i in range(4)]
    prompt = PROMPT_ONE.replace("<|image_pad|>", "<|image_pad|> and <|video_pad|>")
    media = {"image": [random_image(1, 56, 56)], "video": [video]}
    [got] = offloaded.generate(prompt, GREEDY, media=media)
    [ref] = llm(tiny_vl).generate(prompt, GREEDY, media=media)
    assert got.error is None and got.prompt_token_ids == ref.prompt_token_ids
    assert got.token_ids == ref.token_ids and len(set(ref.token_ids)) > 1


def test_encode_copies_the_rows_to_the_text_models_device(tiny_vl):
    """The rows land on the device of the token embeddings, from a tower on another device (here: the rows of a
    tower whose text model is moved to the ``meta`` device come back as ``meta`` tensors)."""
    offloaded = llm(tiny_vl, offload_vision=True)
    model = offloaded.loaded.model
    _, mm = offloaded.loaded.processor.process(offloaded.tokenizer.encode("<|image_pad|>"),
                                               {"image": [random_image(2, 56, 56)]})
    [on_cpu] = model.encode(list(mm.items))
    saved = model.model.embed_tokens.weight
    model.model.embed_tokens.weight = torch.nn.Parameter(saved.to("meta"), requires_grad=False)
    try:
        [moved] = model.encode(list(mm.items))
    finally:
        model.model.embed_tokens.weight = saved
    assert on_cpu.device.type == "cpu" and moved.device.type == "meta" and moved.shape == on_cpu.shape


def test_a_family_without_vision_offload_is_refused(tmp_path):
    from anna_core.errors import UnsupportedModelError
    from anna_core.loading import load_model
    from anna_llama.tiny import build_tiny_checkpoint

    path = build_tiny_checkpoint(tmp_path / "llama")
    with pytest.raises(UnsupportedModelError, match="offload-vision"):
        load_model(path, device="cpu", dtype="fp32", offload_vision=True)


def test_anna_generate_accepts_offload_vision(tiny_vl, tmp_path):
    from tests.cli.test_generate import run

    random_image(3, 56, 56).save(tmp_path / "a.png")
    args = ["generate", "--model-dir", str(tiny_vl), "--device", "cpu", "--dtype", "fp32", "--image",
            str(tmp_path / "a.png"), "--prompt", "What is this?", "--disable-thinking", "--max-new-tokens", "6",
            "--temperature", "0", "--json", "--no-cuda-graph"]
    plain, offloaded = run(*args), run(*args, "--offload-vision")
    assert plain.exit_code == 0 and offloaded.exit_code == 0, offloaded.output
    assert json.loads(offloaded.stdout)["token_ids"] == json.loads(plain.stdout)["token_ids"]


def test_anna_serve_with_offload_vision_answers_as_llm(tiny_vl, tmp_path):
    import httpx
    from anna_core.testing.live_server import start_server

    from tests.qwen35_vl.test_qwen35_vl_server import data_uri

    image = random_image(4, 56, 56)
    live = start_server(["--model-dir", str(tiny_vl), "--model-name", "vl", "--dtype", "fp32", "--max-model-len",
                         "256", "--offload-vision"], tmp_path, tiny_vl)
    try:
        body = {"model": "vl", "max_tokens": 6, "temperature": 0, "chat_template_kwargs": {"enable_thinking": False},
                "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_uri(image)}},
                                                          {"type": "text", "text": "What is this?"}]}]}
        r = httpx.post(f"{live.base_url}/v1/chat/completions", json=body, timeout=60)
    finally:
        live.kill()
    assert r.status_code == 200, r.text
    messages = [{"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": "What is this?"}]}]
    [ref] = llm(tiny_vl).chat(messages, SamplingParams(temperature=0.0, max_tokens=6),
                              chat_template_kwargs={"enable_thinking": False})
    assert r.json()["usage"]["prompt_tokens"] == len(ref.prompt_token_ids)
    assert r.json()["choices"][0]["message"]["content"] == ref.text
