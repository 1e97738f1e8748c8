"""Memory admission and failed steps through the HTTP app: 400 vs 503 refusals, an injected out-of-memory, and
the degraded mode that ``/health`` and ``/healthz`` report (the real AsyncEngine over the fake model)."""

from __future__ import annotations

import json

import pytest
from anna_core.engine.async_engine import AsyncEngine
from anna_core.engine.config import EngineConfig
from anna_core.engine.faults import FaultInjector
from anna_core.engine.llm_engine import LLMEngine
from anna_core.engine.memory_admission import StaticMemoryProbe
from anna_core.errors import InvalidRequestError, MemoryUnavailableError
from anna_core.server.app import create_app
from litestar.testing import TestClient

from tests.core._engine_fakes import FakeLM
from tests.server.conftest import MODEL, FakeEngine, make_state


def _completion(**extra) -> dict:
    return {"model": MODEL, "prompt": "Hello world", "max_tokens": 3, "temperature": 0} | extra


def _error(response) -> dict:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


@pytest.mark.parametrize("stream", [False, True])
def test_memory_refusals_map_to_openai_errors(tiny_tokenizer, stream):
    busy = FakeEngine(tiny_tokenizer, fail_with=MemoryUnavailableError("the running requests hold it; retry later", 3))
    with TestClient(create_app(make_state(tiny_tokenizer, busy)), raise_server_exceptions=False) as client:
        r = client.post("/v1/completions", json=_completion(stream=stream))
    assert r.status_code == 503 and r.headers["retry-after"] == "3"
    assert _error(r) | {"message": ""} == {"message": "", "type": "server_error", "param": None,
                                           "code": "insufficient_memory"}
    never = FakeEngine(tiny_tokenizer, fail_with=InvalidRequestError("too big", param="max_tokens",
                                                                      code="insufficient_memory"))
    with TestClient(create_app(make_state(tiny_tokenizer, never)), raise_server_exceptions=False) as client:
        r = client.post("/v1/completions", json=_completion(stream=stream))
    assert r.status_code == 400
    assert _error(r)["type"] == "invalid_request_error" and _error(r)["code"] == "insufficient_memory"


@pytest.fixture
def served(tiny_tokenizer):
    """``(client, llm engine, faults)``: the app over a started AsyncEngine whose device has 1 MiB of memory."""
    faults = FaultInjector()
    llm = LLMEngine(FakeLM(tiny_tokenizer.vocab_size), faults=faults, memory_probe=StaticMemoryProbe(1 << 20, None),
                    config=EngineConfig(block_size=4, num_blocks=64, max_num_seqs=2, enable_prefix_caching=False,
                                        prompt_cache_size=0, max_consecutive_step_failures=2))
    engine = AsyncEngine(llm)
    engine.start()
    state = make_state(tiny_tokenizer, engine, max_model_len=llm.max_model_len)
    try:
        with TestClient(create_app(state), raise_server_exceptions=False) as client:
            yield client, llm, faults
    finally:
        import asyncio

        asyncio.run(engine.shutdown(drain=False))


def _gauges(client) -> tuple[int, ...]:
    h = client.get("/healthz").json()
    m = h["metrics"]
    return (h["engine"]["running"], h["engine"]["waiting"], h["engine"]["kv_blocks_used"],
            m["requests"]["running"], m["requests"]["waiting"], m["kv_blocks"]["used"], m["state_slots"]["used"])


def test_an_oversized_request_is_refused_before_it_runs(served):
    client, llm, _ = served
    llm.admission.total_bytes = llm.estimate_memory([1] * 3, _sampling(3)).total_bytes + 1000  # 15 more KV blocks
    r = client.post("/v1/completions", json=_completion(max_tokens=200))
    assert r.status_code == 400 and _error(r)["code"] == "insufficient_memory" and "estimated" in _error(r)["message"]
    assert llm.num_steps == 0
    assert client.post("/v1/completions", json=_completion()).status_code == 200
    assert client.get("/healthz").json()["engine"]["memory_admission"]["refused_400"] == 1


def _sampling(max_tokens: int):
    from anna_core.engine.sampling_params import SamplingParams

    return SamplingParams(max_tokens=max_tokens)


def test_an_injected_oom_fails_its_request_and_the_next_ones_succeed(served):
    client, _, faults = served
    faults.arm_next(1)
    r = client.post("/v1/completions", json=_completion())
    assert r.status_code == 503 and "out of memory" in _error(r)["message"] and _error(r)["type"] == "server_error"
    assert _error(r)["code"] == "insufficient_memory" and int(r.headers["retry-after"]) >= 1
    assert "Tried to allocate" not in _error(r)["message"]  # the device's own message stays in the log
    assert client.post("/v1/completions", json=_completion()).status_code == 200
    faults.arm_next(1)
    with client.stream("POST", "/v1/completions", json=_completion(stream=True)) as s:
        lines = [line for line in s.iter_lines() if line.startswith("data: ")]
    assert s.status_code == 200 and lines[-1] == "data: [DONE]"
    event = json.loads(lines[-2][len("data: "):])
    assert "out of memory" in event["error"]["message"] and event["error"]["code"] == "insufficient_memory"
    ok = client.post("/v1/completions", json=_completion())
    assert ok.status_code == 200 and ok.json()["choices"][0]["finish_reason"] == "length"
    assert _gauges(client) == (0,) * 7
    health = client.get("/healthz").json()
    assert health["status"] == "ready" and health["degraded"] is None
    assert health["engine"]["step_failures"]["out_of_memory"] == 2
    assert client.get("/health").status_code == 200


def test_repeated_failures_put_the_server_in_degraded_mode(served):
    client, llm, faults = served
    for _ in range(2):  # max_consecutive_step_failures=2: each request's first decode fails
        faults.arm(llm.num_steps + 2)
        r = client.post("/v1/completions", json=_completion())
        assert r.status_code == 503 and _error(r)["code"] in ("insufficient_memory", "engine_degraded")
    health = client.get("/health")
    assert health.status_code == 503 and health.json()["status"] == "degraded" and "2 steps" in health.json()["error"]
    detail = client.get("/healthz")
    assert detail.status_code == 200 and detail.json()["status"] == "degraded"
    assert detail.json()["degraded"] == llm.degraded
    r = client.post("/v1/completions", json=_completion())
    assert r.status_code == 503 and _error(r)["code"] == "engine_degraded"
    assert _gauges(client) == (0,) * 7


def test_a_retried_prompt_that_runs_out_of_memory_does_not_degrade_the_server(served):
    client, llm, faults = served
    for _ in range(4):  # its prompt's step fails each time (max_consecutive_step_failures=2)
        faults.arm(llm.num_steps + 1)
        r = client.post("/v1/completions", json=_completion())
        assert r.status_code == 503 and _error(r)["code"] == "insufficient_memory"
    assert client.get("/health").status_code == 200 and llm.degraded is None
    assert client.post("/v1/completions", json=_completion()).status_code == 200


def test_a_request_held_when_the_engine_degrades_gets_503_engine_degraded(served):
    client, llm, faults = served
    faults.arm(1, lambda: RuntimeError("CUDA error: an illegal memory access was encountered"))
    r = client.post("/v1/completions", json=_completion())
    assert r.status_code == 503 and _error(r)["code"] == "engine_degraded" and r.headers["retry-after"]
    r = client.post("/v1/completions", json=_completion(stream=True))
    assert r.status_code == 503 and _error(r)["code"] == "engine_degraded"


@pytest.mark.parametrize("fanout", [{"n": 2}, {"prompt": ["Hello world", "Hello world"]}])
def test_a_fan_out_that_never_fits_together_is_a_400_and_holds_nothing(served, fanout):
    client, llm, _ = served
    one = llm.estimate_memory([1] * 3, _sampling(50)).total_bytes
    llm.admission.total_bytes = llm.admission.weights_bytes + int(one * 1.5)
    for _ in range(2):
        r = client.post("/v1/completions", json=_completion(max_tokens=50) | fanout)
        assert r.status_code == 400 and _error(r)["code"] == "insufficient_memory"
    assert llm.admission.report()["admitted"] == 0
    assert client.post("/v1/completions", json=_completion(max_tokens=50)).status_code == 200
    llm.admission.total_bytes = llm.admission.weights_bytes + int(one * 3)
    r = client.post("/v1/completions", json=_completion(max_tokens=5) | fanout)
    assert r.status_code == 200 and len(r.json()["choices"]) == 2
    assert llm.admission.report()["admitted"] == 0
