"""A real ``anna serve`` of the tiny Qwen3-ASR (its main task, ``transcribe``), with the family's load option from
``--asr-max-inference-batch-size``: the openai client transcribes over HTTP, streaming too, ``/healthz`` names the
task, and the text routes are not served."""

from __future__ import annotations

import httpx
import numpy as np

from tests.audio.test_transcribe_server import RATE, wav


def test_anna_serve_transcribes(tiny_checkpoint, live_server):
    from openai import OpenAI

    model = tiny_checkpoint("qwen3_asr")
    server = live_server(model, "--device", "cpu", "--model-name", "asr", "--asr-max-inference-batch-size", "2")
    oa = OpenAI(base_url=server.base_url + "/v1", api_key="x")
    audio = wav((0.2 * np.random.default_rng(3).standard_normal(RATE)).astype(np.float32))
    text = oa.audio.transcriptions.create(model="asr", file=("a.wav", audio), language="en").text
    stream = oa.audio.transcriptions.create(model="asr", file=("a.wav", audio), language="en", stream=True)
    events = list(stream)
    assert [e.type for e in events][-1] == "transcript.text.done" and events[-1].text == text
    assert "".join(e.delta for e in events if e.type == "transcript.text.delta") == text
    healthz = httpx.get(server.base_url + "/healthz").json()
    assert healthz["task"] == "transcribe" and healthz["engine"]["transcription"]["aligner"] is False
    assert httpx.post(server.base_url + "/v1/chat/completions", json={"model": "asr", "messages": []}).status_code == 404
