"""Images through the HTTP server: a real ``anna serve`` of the tiny vision-language checkpoint, asked with the
official openai client (``image_url`` parts as data URIs), answers what HF ``generate`` answers for the same
processor inputs; media the server cannot take are 400s and it keeps serving."""

from __future__ import annotations

import base64
import io

import pytest
from anna_core.testing.oracle import hf_greedy_inputs

from tests.qwen35_vl.conftest import hf_inputs, random_image, solid_image

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
    tokens = hf_greedy_inputs(hf_vl, hf_inputs(tiny_vl, text, images), N)
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


def test_too_many_media_are_refused_before_any_is_fetched(client):
    """17 parts (the default max_media_per_request is 16) are one 400 before the template renders them or the first
    is fetched: the undecodable first image would otherwise be the error."""
    import openai

    part = {"type": "image_url", "image_url": {"url": "data:image/png;base64,bm90IGFuIGltYWdl"}}
    with pytest.raises(openai.BadRequestError, match=r"carries 17 images and videos; this server takes at most 16"):
        ask(client, [{"role": "user", "content": [part] * 17}])
    with pytest.raises(openai.BadRequestError, match="cannot decode image"):
        ask(client, [{"role": "user", "content": [part] * 16}])


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


def mp4(num_frames: int, rate: int, seed: int, size=(48, 32)) -> bytes:
    """An MPEG-4 clip of ``num_frames`` seeded random frames at ``rate`` fps, made with PyAV."""
    pytest.importorskip("av")
    from anna_core.testing.video import random_mp4

    return random_mp4(num_frames, rate, seed, size)


def video_uri(data: bytes) -> str:
    return "data:video/mp4;base64," + base64.b64encode(data).decode()


def sampled(data: bytes, rate: int, fps: float = 2.0):
    """The frames the server samples from ``data`` and HF's metadata for them (source fps, frame indices, count)."""
    from anna_core.media import decode_video

    video = decode_video(data, fps=fps, max_frames=768)
    return video.frames, (float(rate), [round(t * rate) for t in video.timestamps_s], round(video.duration_s * rate))


def hf_media_reply(tiny_vl, hf_vl, messages, images, videos) -> str:
    """HF's greedy reply to ``messages`` with image and video parts; ``videos``: ``sampled`` of each clip."""
    from transformers import AutoTokenizer

    from tests.qwen35_vl.conftest import hf_video_inputs

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_vl))
    kinds = {"image_url": {"type": "image"}, "video_url": {"type": "video"}}
    parts = [[kinds.get(p["type"], p) for p in m["content"]] if isinstance(m["content"], list) else m["content"]
             for m in messages]
    text = tokenizer.apply_chat_template([{**m, "content": c} for m, c in zip(messages, parts)], tokenize=False,
                                         add_generation_prompt=True, enable_thinking=False)
    inputs = hf_video_inputs(tiny_vl, text, [f for f, _ in videos], images, [meta for _, meta in videos])
    tokens = hf_greedy_inputs(hf_vl, inputs, N)
    ends = [i for i, t in enumerate(tokens) if t in (2, 0)]
    return tokenizer.decode(tokens[:ends[0]] if ends else tokens, skip_special_tokens=True)


def test_a_data_uri_video_gets_hf_generates_reply(client, tiny_vl, hf_vl):
    clip = mp4(8, rate=4, seed=1)  # 2 s: sampled at 2 fps, frames 0, 2, 4, 6
    messages = [{"role": "user", "content": [{"type": "text", "text": "What happens? "},
                                             {"type": "video_url", "video_url": {"url": video_uri(clip)}}]}]
    frames, meta = sampled(clip, 4)
    assert len(frames) == 4 and meta[1] == [0, 2, 4, 6]
    assert ask(client, messages) == hf_media_reply(tiny_vl, hf_vl, messages, [], [(frames, meta)])


def test_an_image_and_videos_in_one_message_and_across_turns(client, tiny_vl, hf_vl):
    a, one, two = random_image(7, 32, 48), mp4(6, rate=2, seed=2), mp4(4, rate=4, seed=3)
    messages = [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_uri(a)}},
                                     {"type": "text", "text": "and"},
                                     {"type": "video_url", "video_url": {"url": video_uri(one)}}]},
        {"role": "assistant", "content": "Noise."},
        {"role": "user", "content": [{"type": "video_url", "video_url": video_uri(two)},
                                     {"type": "text", "text": "And this one?"}]},
    ]
    videos = [sampled(one, 2), sampled(two, 4)]
    assert [len(f) for f, _ in videos] == [6, 2]
    assert ask(client, messages) == hf_media_reply(tiny_vl, hf_vl, messages, [a], videos)


def test_video_sampling_through_mm_processor_kwargs_and_bad_videos(client):
    import openai

    messages = [{"role": "user", "content": [{"type": "video_url", "video_url": {"url": video_uri(
        mp4(8, rate=4, seed=4))}}]}]

    def prompt_tokens(**kwargs):
        return client.chat.completions.create(model=MODEL, messages=messages, max_tokens=1, extra_body={
            **NO_THINKING, "mm_processor_kwargs": kwargs}).usage.prompt_tokens

    # a frame group (2 frames of 48x32: 4x6 patches) is 6 placeholders plus its timestamp and vision start / end
    base, fast, capped = prompt_tokens(), prompt_tokens(fps=4), prompt_tokens(max_frames=2)
    assert fast > base > capped
    with pytest.raises(openai.BadRequestError, match="fps"):
        prompt_tokens(fps=-1)
    bad = [{"role": "user", "content": [{"type": "video_url", "video_url": {"url": video_uri(b"\x00" * 64)}}]}]
    with pytest.raises(openai.BadRequestError, match="cannot decode video"):
        ask(client, bad)
    assert client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=2,
                                          temperature=0, extra_body={**NO_THINKING, "ignore_eos": True}
                                          ).usage.completion_tokens == 2


def test_server_video_defaults_reach_the_decoder(tiny_vl, tmp_path):
    """``--mm-processor-kwargs`` ``fps`` / ``max_frames`` set how a ``video_url`` is sampled; a request's own
    override them; without either the checkpoint's ``fps`` (2) applies."""
    from anna_core.media import MediaFetcher, MediaPolicy
    from anna_core.server import prepare
    from anna_core.server.protocol import ChatCompletionRequest
    from anna_core.server.state import ServerState

    from tests.qwen35.conftest import load_anna

    loaded = load_anna(tiny_vl)
    (tmp_path / "v.mp4").write_bytes(mp4(8, rate=4, seed=6))  # 2 s

    def frame_groups(defaults, **extra):
        state = ServerState(model_name=MODEL, processor=loaded.processor, mm_processor_kwargs=defaults,
                            media_fetcher=MediaFetcher(MediaPolicy(allowed_local_media_path=tmp_path)))
        state.tokenizer = loaded.tokenizer
        req = ChatCompletionRequest.from_json({"model": MODEL, "messages": [
            {"role": "user", "content": [{"type": "video_url", "video_url": {"url": str(tmp_path / "v.mp4")}}]}],
            **extra})
        _, mm = prepare.chat_media(state, req, prepare.chat_prompt_ids(state, req))
        assert {m.modality for m in mm.items} == {"video"}
        return len(mm.items)

    assert frame_groups({}) == 2  # 4 frames at 2 fps
    assert frame_groups({"fps": 4}) == 4  # 8 frames
    assert frame_groups({"fps": 4, "max_frames": 3}) == 2  # 3 frames, the last repeated
    assert frame_groups({"fps": 4}, mm_processor_kwargs={"fps": 1}) == 1  # the request's own: 2 frames


def test_a_request_cannot_raise_the_media_bounds(client, server, tiny_vl):
    """A request's mm_processor_kwargs may narrow what the model's processor allows, never widen it: an image is
    never resized past the checkpoint's max_pixels, a video never keeps more than its max_frames, and a sampling
    rate must be a finite number (each otherwise a 400 before any resize or decode)."""
    import json

    import openai

    size = json.loads((tiny_vl / "preprocessor_config.json").read_text())["size"]
    image = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_uri(solid_image(
        (10, 20, 30), 56, 56))}}]}]
    video = [{"role": "user", "content": [{"type": "video_url", "video_url": {"url": video_uri(
        mp4(8, rate=4, seed=4))}}]}]

    def send(messages, **kwargs):
        return client.chat.completions.create(model=MODEL, messages=messages, max_tokens=1, extra_body={
            **NO_THINKING, "mm_processor_kwargs": kwargs})

    for key in ("max_pixels", "min_pixels"):
        with pytest.raises(openai.BadRequestError, match=f"{key} .* exceeds the checkpoint's max_pixels"):
            send(image, **{key: size["longest_edge"] + 1})
    assert send(image, max_pixels=size["longest_edge"]).usage.prompt_tokens > 0
    with pytest.raises(openai.BadRequestError, match="max_frames .* exceeds the model's limit"):
        send(video, max_frames=10 ** 6)
    import httpx

    for bad in ("NaN", "Infinity"):  # Python's json module reads these (the openai client will not send them)
        body = json.dumps({"model": MODEL, "messages": video, "max_tokens": 1, **NO_THINKING,
                           "mm_processor_kwargs": {"fps": 1}}).replace('"fps": 1', f'"fps": {bad}')
        reply = httpx.post(f"{server.base_url}/v1/chat/completions", content=body, timeout=30,
                           headers={"Content-Type": "application/json"})
        assert reply.status_code == 400 and "fps" in reply.json()["error"]["message"], reply.text


def test_media_preparation_is_bounded_by_the_servers_media_slots(tiny_vl):
    """Requests with media hold a worker thread while their media are fetched and decoded: past
    ServerState.media_slots at once, one more is refused (429) instead of queueing behind them."""
    import threading

    from anna_core.errors import QueueFullError
    from anna_core.server import prepare
    from anna_core.server.protocol import ChatCompletionRequest
    from anna_core.server.state import ServerState

    from tests.qwen35.conftest import load_anna

    loaded = load_anna(tiny_vl)
    state = ServerState(model_name=MODEL, processor=loaded.processor, media_slots=threading.BoundedSemaphore(1))
    state.tokenizer = loaded.tokenizer
    req = ChatCompletionRequest.from_json({"model": MODEL, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": data_uri(solid_image((1, 2, 3), 56, 56))}}]}]})
    ids = prepare.chat_prompt_ids(state, req)
    assert state.media_slots.acquire(blocking=False)  # another request is preparing its media
    with pytest.raises(QueueFullError, match="media"):
        prepare.chat_media(state, req, ids)
    state.media_slots.release()
    expanded, mm = prepare.chat_media(state, req, ids)
    assert mm is not None and len(expanded) > len(ids)
    assert state.media_slots.acquire(blocking=False)  # the slot came back after the request
