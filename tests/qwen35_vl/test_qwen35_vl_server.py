"""Images through the HTTP server: a real ``anna serve`` of the tiny vision-language checkpoint, asked with the
official openai client (``image_url`` parts as data URIs), answers what HF ``generate`` answers for the same
processor inputs; media the server cannot take are 400s and it keeps serving."""

from __future__ import annotations

import base64
import io

import pytest

from tests.qwen35_vl.conftest import hf_greedy_vl, hf_inputs, random_image, solid_image

MODEL = "tiny-qwen35-vl"
N = 12
NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}


def data_uri(image) -> str:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


@pytest.fixture(scope="module")
def server(tiny_vl, tmp_path_factory):
    from anna_core.testing.live_server import start_server

    live = start_server(["--model-dir", str(tiny_vl), "--model-name", MODEL, "--dtype", "fp32",
                         "--max-model-len", "512"], tmp_path_factory.mktemp("serve-vl-log"), tiny_vl)
    yield live
    live.kill()


@pytest.fixture(scope="module")
def client(server):
    import openai

    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0)


def hf_reply(tiny_vl, hf_vl, messages, images) -> str:
    """HF's greedy reply (up to ``N`` tokens, cut at an EOS id) to ``messages`` rendered by the checkpoint's
    template, image parts as ``{"type": "image"}``."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_vl))
    parts = [[{"type": "image"} if p["type"] == "image_url" else p for p in m["content"]]
             if isinstance(m["content"], list) else m["content"] for m in messages]
    text = tokenizer.apply_chat_template([{**m, "content": c} for m, c in zip(messages, parts)], tokenize=False,
                                         add_generation_prompt=True, enable_thinking=False)
    tokens = hf_greedy_vl(hf_vl, hf_inputs(tiny_vl, text, images), N)
    ends = [i for i, t in enumerate(tokens) if t in (2, 0)]
    return tokenizer.decode(tokens[:ends[0]] if ends else tokens, skip_special_tokens=True)


def ask(client, messages):
    reply = client.chat.completions.create(model=MODEL, messages=messages, temperature=0, max_tokens=N,
                                           extra_body=NO_THINKING)
    return reply.choices[0].message.content or ""


def test_a_data_uri_image_gets_hf_generates_reply(client, tiny_vl, hf_vl):
    red = solid_image((255, 0, 0), 56, 56)
    messages = [{"role": "user", "content": [{"type": "text", "text": "What is this? "},
                                             {"type": "image_url", "image_url": {"url": data_uri(red), "detail": "low"}}]}]
    got = ask(client, messages)
    assert got == hf_reply(tiny_vl, hf_vl, messages, [red])
    noise = random_image(1, 56, 56)
    other = [{**messages[0], "content": [messages[0]["content"][0],
                                         {"type": "image_url", "image_url": {"url": data_uri(noise)}}]}]
    assert ask(client, other) == hf_reply(tiny_vl, hf_vl, other, [noise])


def test_two_images_in_two_turns(client, tiny_vl, hf_vl):
    a, b = solid_image((0, 0, 255), 56, 56), random_image(3, 28, 84)
    messages = [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_uri(a)}},
                                     {"type": "text", "text": "First."}]},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": [{"type": "text", "text": "And this?"},
                                     {"type": "image_url", "image_url": {"url": data_uri(b)}}]},
    ]
    assert ask(client, messages) == hf_reply(tiny_vl, hf_vl, messages, [a, b])


@pytest.mark.parametrize(("url", "needle"), [
    ("data:image/png;base64,bm90IGFuIGltYWdl", "cannot decode image"),
    ("file:///etc/passwd", "local"),
    ("http://127.0.0.1:1/x.png", "127.0.0.1"),
])
def test_media_it_cannot_take_are_400s_and_it_keeps_serving(client, url, needle):
    import openai

    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]
    with pytest.raises(openai.BadRequestError, match=needle):
        ask(client, messages)
    after = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hello"}], max_tokens=3,
                                           temperature=0, extra_body={**NO_THINKING, "ignore_eos": True})
    assert after.usage.completion_tokens == 3  # still serving


def test_pixel_bounds_per_request_through_mm_processor_kwargs(client):
    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_uri(random_image(4, 56, 56))}}]}]
    usage = [client.chat.completions.create(model=MODEL, messages=messages, max_tokens=1, extra_body={
        **NO_THINKING, **extra}).usage.prompt_tokens for extra in ({}, {"mm_processor_kwargs": {"max_pixels": 1024}})]
    assert usage[0] - usage[1] == 16 - 4  # 64x64 -> 32x32 pixels: 16 -> 4 image tokens
    import openai

    with pytest.raises(openai.BadRequestError, match="min_pixels"):
        client.chat.completions.create(model=MODEL, messages=messages, max_tokens=1,
                                       extra_body={"mm_processor_kwargs": {"min_pixels": "many"}})


def test_server_media_settings_reach_the_processor(tiny_vl, tmp_path):
    from anna_core.media import MediaFetcher, MediaPolicy
    from anna_core.server import prepare
    from anna_core.server.protocol import ChatCompletionRequest
    from anna_core.server.state import ServerState

    from tests.qwen35.conftest import load_anna

    loaded = load_anna(tiny_vl)
    random_image(5, 56, 56).save(tmp_path / "a.png")
    state = ServerState(model_name=MODEL, processor=loaded.processor, mm_processor_kwargs={"max_pixels": 1024},
                        media_fetcher=MediaFetcher(MediaPolicy(allowed_local_media_path=tmp_path)))
    image_id = loaded.processor.image_token_id

    def image_tokens(url, **extra):
        req = ChatCompletionRequest.from_json({"model": MODEL, "messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}], **extra})
        ids, mm = prepare.chat_media(state, req, prepare.chat_prompt_ids(state, req))
        return ids.count(image_id)

    state.tokenizer = loaded.tokenizer
    assert image_tokens(f"file://{tmp_path / 'a.png'}") == 4  # the server default: 32x32 pixels
    assert image_tokens(str(tmp_path / "a.png"), mm_processor_kwargs={"max_pixels": 4096}) == 16  # the request's
    from anna_core.errors import InvalidRequestError

    with pytest.raises(InvalidRequestError, match="outside|escape|allowed"):
        image_tokens(str(tmp_path / ".." / "a.png"))
