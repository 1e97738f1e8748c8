"""``POST /v1/audio/transcriptions`` through the real server app over the tiny random Qwen3-ASR (the ``transcribe``
task's engine, started as ``anna serve`` starts it): the openai client and raw multipart, every response format,
concurrent requests equal to each alone, long audio in windows each equal to the model on that window alone,
streamed deltas, and every refusal in OpenAI's error shape.

"Alone" is the same model on a synchronous engine of its own, run before the server starts, one clip at a time.
Outputs are kept short (2 tokens per audio second + 4) so the CPU run stays quick.
"""

from __future__ import annotations

import asyncio
import io
import json

import numpy as np
import pytest
import soundfile
from anna_audio.plugin import TRANSCRIBE_TASK
from anna_audio.transcribe import formats, task
from anna_audio.transcribe.asr import AsrPrompts
from anna_audio.transcribe.service import TranscriptionPlanner
from anna_audio.transcribe.windows import split_windows
from anna_core.engine.config import EngineConfig
from anna_core.loading import load_model
from anna_core.plugins import make_plugin_manager
from anna_core.server.app import create_app
from anna_core.server.state import ServerState
from anna_core.testing.tiny import write_tiny_checkpoint
from litestar.testing import AsyncTestClient, TestClient

RATE = 16000
WINDOW_S = 4.0
MODEL = "tiny-asr"
SILENCES = [(3.0, 3.4), (6.5, 6.9)]


def wav(samples: np.ndarray) -> bytes:
    """Float WAV: decodes to exactly these samples (16 kHz passes through unresampled)."""
    out = io.BytesIO()
    soundfile.write(out, samples, RATE, format="WAV", subtype="FLOAT")
    return out.getvalue()


def clip(seconds: float, seed: int) -> np.ndarray:
    return (0.2 * np.random.default_rng(seed).standard_normal(round(seconds * RATE))).astype(np.float32)


def long_clip() -> np.ndarray:
    x = clip(9.5, 99)
    for a, b in SILENCES:
        x[round(a * RATE):round(b * RATE)] *= 1e-3
    return x


CLIPS = [clip(1.0 + 0.125 * i, i) for i in range(16)]


def planner_of(loaded, built, aligner=None) -> TranscriptionPlanner:
    from anna_audio.qwen3_asr.prompt import DEFAULT_LANGUAGES

    prompts = AsrPrompts(loaded.tokenizer, loaded.processor, DEFAULT_LANGUAGES, WINDOW_S)
    return TranscriptionPlanner(prompts, max_model_len=built.max_model_len, aligner=aligner, tokens_per_second=2,
                                extra_tokens=4)


def hf_window_texts(path, x: np.ndarray, planner: TranscriptionPlanner) -> list[str]:
    """Each window's transcript by HF transformers alone: ``Qwen3ASRProcessor.apply_transcription_request`` and
    greedy ``Qwen3ASRForConditionalGeneration.generate`` with the window's output limit, decoded as
    ``Qwen3ASRProcessor.decode`` does and parsed as Anna parses (control tokens dropped)."""
    import torch
    from anna_audio.qwen3_asr.prompt import parse_asr_output
    from transformers import Qwen3ASRForConditionalGeneration, Qwen3ASRProcessor

    processor = Qwen3ASRProcessor.from_pretrained(str(path))
    model = Qwen3ASRForConditionalGeneration.from_pretrained(str(path), dtype=torch.float32).eval()
    texts = []
    for w in split_windows(x, WINDOW_S):
        inputs = processor.apply_transcription_request(audio=x[w.start:w.end])
        limit = planner.window_params(w, inputs["input_ids"].shape[1], 0.0).max_tokens
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=limit, do_sample=False)
        new = out[0, inputs["input_ids"].shape[1]:].tolist()
        decoded = processor.tokenizer.decode(new, skip_special_tokens=True)  # as Qwen3ASRProcessor.decode does
        texts.append(parse_asr_output(decoded, control=planner.prompts.control)[1])  # control tokens dropped
    return texts


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """``(TestClient, references)``: references[i] is clip i's text alone; references["long"] each window's."""
    path = write_tiny_checkpoint("qwen3_asr", tmp_path_factory.mktemp("asr") / "model")
    loaded = load_model(path, device="cpu")
    alone = task.build(loaded, EngineConfig(max_num_seqs=1), None)
    alone.planner = planner_of(loaded, alone)
    refs: dict = {i: alone.transcribe(wav(x))["text"] for i, x in enumerate(CLIPS)}
    x = long_clip()
    refs["long"] = [alone.transcribe(wav(x[w.start:w.end]))["text"] for w in split_windows(x, WINDOW_S)]
    refs["long_hf"] = hf_window_texts(path, x, alone.planner)
    refs["forced"] = alone.transcribe(wav(CLIPS[0]), language="de", prompt="Anna")["text"]

    built = task.build(loaded, EngineConfig(max_num_seqs=32), None)
    built.planner = planner_of(loaded, built)
    state = ServerState(model_name=MODEL)
    state.set_ready(task.start(built), loaded.tokenizer, max_model_len=built.max_model_len)
    app = create_app(state, pm=make_plugin_manager(load_entry_points=False), task=TRANSCRIBE_TASK)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client, refs, app, built.planner


def post(client, audio: bytes | None, **fields):
    files = None if audio is None else {"file": ("clip.wav", audio, "audio/wav")}
    data = {"model": MODEL, **fields}
    return client.post("/v1/audio/transcriptions", files=files, data=data)


def test_openai_client_every_format(served):
    from openai import OpenAI

    client, refs, _, _planner = served
    oa = OpenAI(base_url="http://testserver.local/v1", api_key="x", http_client=client)
    audio = wav(CLIPS[3])
    duration = CLIPS[3].shape[0] / RATE
    result = oa.audio.transcriptions.create(model=MODEL, file=("a.wav", audio))
    assert result.text == refs[3] and result.text
    assert oa.audio.transcriptions.create(model=MODEL, file=("a.wav", audio), response_format="text") == refs[3]
    verbose = oa.audio.transcriptions.create(model=MODEL, file=("a.wav", audio), response_format="verbose_json")
    assert verbose.duration == pytest.approx(duration, abs=5e-4) and verbose.text == refs[3]
    assert [(s.start, s.end, s.text) for s in verbose.segments] == [(0.0, round(duration, 3), refs[3])]
    segments = [formats.Segment(0.0, duration, refs[3])]
    assert oa.audio.transcriptions.create(model=MODEL, file=("a.wav", audio), response_format="srt") \
        == formats.to_srt(segments)
    assert oa.audio.transcriptions.create(model=MODEL, file=("a.wav", audio), response_format="vtt") \
        == formats.to_vtt(segments)


def test_raw_multipart_and_content_types(served):
    client, refs, _, _ = served
    r = post(client, wav(CLIPS[1]))
    assert r.status_code == 200 and r.json() == {"text": refs[1], "usage": {"type": "duration", "seconds": 2}}
    r = post(client, wav(CLIPS[1]), response_format="text")
    assert r.text == refs[1] and r.headers["content-type"].startswith("text/plain")
    r = post(client, wav(CLIPS[1]), response_format="vtt")
    assert r.headers["content-type"].startswith("text/vtt") and r.text.startswith("WEBVTT\n\n")
    r = post(client, wav(CLIPS[1]), response_format="srt")
    assert r.text.startswith("1\n00:00:00,000 --> 00:00:01,125\n")


def test_language_and_prompt_are_forced(served):
    client, refs, _, _ = served
    r = post(client, wav(CLIPS[0]), language="de", prompt="Anna")
    assert r.status_code == 200 and r.json()["text"] == refs["forced"]
    body = post(client, wav(CLIPS[0]), language="German", prompt="Anna", response_format="verbose_json").json()
    assert body["language"] == "german" and body["text"] == refs["forced"]


def test_sixteen_concurrent_requests_equal_each_alone(served):
    _, refs, app, _ = served

    async def run():
        async with AsyncTestClient(app) as client:
            async def one(i):
                r = await client.post("/v1/audio/transcriptions", data={"model": MODEL},
                                      files={"file": ("c.wav", wav(CLIPS[i]), "audio/wav")})
                return r.status_code, r.json()["text"]
            return await asyncio.gather(*(one(i) for i in range(16)))

    assert asyncio.run(run()) == [(200, refs[i]) for i in range(16)]


def test_long_audio_windows(served):
    client, refs, _, _ = served
    x = long_clip()
    windows = split_windows(x, WINDOW_S)
    assert len(windows) == 3 and all(w.end - w.start <= WINDOW_S * RATE for w in windows)
    for w in windows[:-1]:  # each cut lands in a silence
        assert any(a <= w.end / RATE <= b for a, b in SILENCES)
    assert refs["long"] == refs["long_hf"]  # each window alone = HF transformers on that window
    body = post(client, wav(x), response_format="verbose_json").json()
    assert body["duration"] == pytest.approx(9.5) and body["text"] == " ".join(t for t in refs["long"] if t)
    assert [(s["start"], s["end"], s["text"]) for s in body["segments"]] == [
        (round(w.start_s, 3), round(w.end_s, 3), t) for w, t in zip(windows, refs["long"]) if t]


def sse_events(text: str) -> list[dict]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]


def test_streaming_deltas_make_the_final_text(served):
    client, refs, _, _ = served
    for audio, expected in ((wav(CLIPS[5]), refs[5]), (wav(long_clip()), " ".join(t for t in refs["long"] if t))):
        r = post(client, audio, stream="true")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r.text)
        deltas = [e["delta"] for e in events[:-1]]
        assert all(e["type"] == "transcript.text.delta" for e in events[:-1]) and len(deltas) > 1
        assert events[-1]["type"] == "transcript.text.done"
        assert "".join(deltas) == events[-1]["text"] == expected


def error_of(r, status: int, param: str | None = None) -> str:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["type"] == "invalid_request_error"
    if param is not None:
        assert err["param"] == param
    return err["message"]


def test_refusals(served):
    client, _, app, planner = served
    good = wav(CLIPS[0])
    assert error_of(post(client, b""), 400, "file").startswith("audio refused")
    assert "truncated" in error_of(post(client, good[: len(good) // 2]), 400, "file")
    png = b"\x89PNG\r\n\x1a\n" + bytes(64)
    assert error_of(post(client, png), 400, "file").startswith("audio refused")
    assert "unsupported language" in error_of(post(client, good, language="xx"), 400, "language")
    assert "response_format" in error_of(post(client, good, response_format="xml"), 400, "response_format")
    message = error_of(post(client, good, response_format="verbose_json", **{"timestamp_granularities[]": "word"}),
                       400, "timestamp_granularities[]")
    assert "--asr-aligner-dir" in message
    assert "no 'file' field" in error_of(post(client, None), 400, "file")
    assert error_of(post(client, good, model="whisper-1"), 404, "model")
    planner.limits, limits = type(planner.limits)(max_duration_s=2.0), planner.limits
    try:
        assert "over the limit of 2 s" in error_of(post(client, wav(clip(3.0, 7))), 400, "file")
    finally:
        planner.limits = limits
    config = app.dependencies["server"].dependency().engine.engine.engine.config
    config.max_waiting_requests, saved = 2, config.max_waiting_requests
    try:
        assert "cut into 3 windows" in error_of(post(client, wav(long_clip())), 400, "file")
    finally:
        config.max_waiting_requests = saved
    r = client.post("/v1/audio/transcriptions", content=b"{}", headers={"content-type": "application/json"})
    assert "must be multipart/form-data" in error_of(r, 400)
    big = client.post("/v1/audio/transcriptions", files={"file": ("big.wav", bytes(27 * 1024 * 1024), "audio/wav")})
    assert big.status_code == 413 and "error" in big.json()
    assert post(client, good).status_code == 200  # the server still serves


def test_word_and_segment_timestamps_from_the_aligner(served, tmp_path):
    from anna_audio.transcribe.aligner import ForcedAligner
    from anna_audio.transcribe.aligner_tiny import build_tiny_aligner

    _, _, app, planner = served
    aligner = ForcedAligner.load(build_tiny_aligner(tmp_path / "aligner"))
    x = long_clip()
    windows = split_windows(x, WINDOW_S)
    planner.aligner = aligner
    try:
        with TestClient(app, raise_server_exceptions=False) as client:
            r = post(client, wav(x), response_format="verbose_json", language="en",
                     **{"timestamp_granularities[]": ["word", "segment"]})
            assert "not available for Thai" in error_of(post(client, wav(x), response_format="verbose_json",
                                                             language="th", **{"timestamp_granularities[]": "word"}),
                                                        400, "language")
    finally:
        planner.aligner = None
    assert r.status_code == 200, r.text
    body = r.json()
    texts = [s["text"] for s in body["segments"]]
    expected_words = []
    for w, text in zip(windows, texts):
        span = w.end_s - w.start_s  # times past the window's end (the random head's) are clamped to it
        for word in aligner.align(x[w.start:w.end], text, "English"):
            expected_words.append({"word": word.word, "start": round(w.start_s + min(word.start, span), 3),
                                   "end": round(w.start_s + min(word.end, span), 3)})
    assert body["words"] == expected_words and expected_words
    assert all(w.start_s <= s["start"] <= s["end"] <= w.end_s for w, s in zip(windows, body["segments"]))


def test_uploads_beyond_the_media_slots_are_429(served):
    client, _, app, _ = served
    state = app.dependencies["server"].dependency()
    taken = 0
    while state.media_slots.acquire(blocking=False):
        taken += 1
    try:
        r = post(client, wav(CLIPS[0]))
        assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limit_exceeded"
    finally:
        for _ in range(taken):
            state.media_slots.release()
    assert post(client, wav(CLIPS[0])).status_code == 200


def _multipart(audio: bytes, **fields: str) -> tuple[bytes, bytes]:
    boundary = b"annaboundary1234"
    parts = [b"--" + boundary + b'\r\nContent-Disposition: form-data; name="' + k.encode() + b'"\r\n\r\n' + v.encode()
             + b"\r\n" for k, v in {"model": MODEL, **fields}.items()]
    parts.append(b"--" + boundary + b'\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
                 b"Content-Type: audio/wav\r\n\r\n" + audio + b"\r\n")
    return b"".join(parts) + b"--" + boundary + b"--\r\n", b"multipart/form-data; boundary=" + boundary


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_goes_away_aborts_every_window(served, stream):
    """Raw ASGI: the body, then a disconnect 0.5 s later, while the windows (given 400 tokens each) still run."""
    import time

    _, _, app, planner = served
    state = app.dependencies["server"].dependency()
    body, content_type = _multipart(wav(long_clip()), **({"stream": "true"} if stream else {}))
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive():
        if messages:
            return messages.pop(0)
        await asyncio.sleep(0.5)
        return {"type": "http.disconnect"}

    async def send(message):
        pass

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/v1/audio/transcriptions", "raw_path": b"/v1/audio/transcriptions", "query_string": b"",
             "root_path": "", "headers": [(b"content-type", content_type),
                                          (b"content-length", str(len(body)).encode())],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 8000), "state": {}}
    planner.extra_tokens, saved = 400, planner.extra_tokens
    before = state.engine.stats()["tokens_generated"]
    try:
        asyncio.run(asyncio.wait_for(app(scope, receive, send), timeout=60))
    finally:
        planner.extra_tokens = saved
    deadline = time.monotonic() + 2  # three windows of 400 tokens each would run far longer than this
    while state.engine.stats()["running"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert state.engine.stats()["running"] == 0
    assert state.engine.stats()["tokens_generated"] - before < 3 * 400
