"""App-level server tests: the real litestar app over a scripted fake engine and the tiny tokenizer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from anna_core.engine.outputs import RequestOutput, Usage
from anna_core.engine.sampling_params import SamplingParams
from anna_core.server.app import create_app
from anna_core.server.state import ServerState
from anna_core.tokenizer import Tokenizer

MODEL = "tiny-qwen"
SCRIPT = "Hello, world! How are you today?"


class FakeEngine:
    """Implements the AsyncEngine surface the server uses, answering from a script.

    Each request answers ``script(prompt_ids)`` one token per step, honouring ``max_tokens``
    (finish "length") and stop strings (finish "stop", stop text removed). It records every call.
    """

    def __init__(self, tokenizer: Tokenizer, script: Callable[[list[int]], str] = lambda ids: SCRIPT,
                 step_delay: float = 0.0, fail_with: Exception | None = None):
        self.tok = tokenizer
        self.script = script
        self.step_delay = step_delay
        self.fail_with = fail_with
        self.calls: list[tuple[str, list[int], SamplingParams]] = []
        self.aborted: list[str] = []
        self.completed: list[str] = []

    async def generate(self, request_id: str, prompt_token_ids: list[int],
                       params: SamplingParams) -> AsyncIterator[RequestOutput]:
        self.calls.append((request_id, list(prompt_token_ids), params))
        if self.fail_with is not None:
            raise self.fail_with
        ids = self.tok.encode(self.script(prompt_token_ids))
        out_ids: list[int] = []
        text = ""
        for tid in ids:
            await asyncio.sleep(self.step_delay)
            out_ids.append(tid)
            new_text = self.tok.decode(out_ids)
            delta, text = new_text[len(text):], new_text
            finish = None
            hit = next((s for s in params.stop if s in text), None)
            if hit is not None:
                cut = text.index(hit)
                delta = delta[: max(0, len(delta) - (len(text) - cut))]
                text, finish = text[:cut], "stop"
            elif len(out_ids) == params.max_tokens:
                finish = "length"
            elif len(out_ids) == len(ids):
                finish = "stop"
            yield RequestOutput(
                request_id=request_id, prompt_token_ids=list(prompt_token_ids), text=text,
                token_ids=list(out_ids), delta_text=delta, delta_token_ids=[tid], finished=finish is not None,
                finish_reason=finish, usage=Usage(len(prompt_token_ids), len(out_ids)),
            )
            if finish is not None:
                self.completed.append(request_id)
                return

    def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)

    def stats(self) -> dict[str, Any]:
        return {"running": 0, "waiting": 0, "requests_served": len(self.completed)}


@pytest.fixture(scope="session")
def tiny_tokenizer(tmp_path_factory) -> Tokenizer:
    from anna_core.testing.checkpoints import build_tiny_tokenizer

    path = tmp_path_factory.mktemp("tiny-tokenizer")
    build_tiny_tokenizer(path)
    return Tokenizer.from_pretrained(path)


def make_state(tokenizer: Tokenizer, engine: Any, **overrides: Any) -> ServerState:
    state = ServerState(model_name=MODEL)
    state.set_ready(engine, tokenizer, max_model_len=overrides.pop("max_model_len", 256), eos_token_ids=[2],
                    checkpoint_sampling=overrides.pop("checkpoint_sampling", {}),
                    info={"family": "qwen35", "device": "cpu", "dtype": "float32", "kernels": {"rms_norm": "reference"},
                          "weights": {"linear": "int4-gptq", "lm_head": "float32"}})
    for key, value in overrides.items():
        setattr(state, key, value)
    return state


@pytest.fixture
def engine(tiny_tokenizer) -> FakeEngine:
    return FakeEngine(tiny_tokenizer)


@pytest.fixture
def state(tiny_tokenizer, engine) -> ServerState:
    return make_state(tiny_tokenizer, engine)


@pytest.fixture
def client(state):
    from litestar.testing import TestClient

    with TestClient(create_app(state), raise_server_exceptions=False) as c:
        yield c


@pytest.fixture(scope="session")
def qwen35_tokenizer_dir(tmp_path_factory):
    """The real Qwen3.5 vocabulary as a tokenizer folder, converted once per session (~5 s)."""
    from anna_core.testing.qwen_vocab import build_qwen35_tokenizer

    return build_qwen35_tokenizer(tmp_path_factory.mktemp("qwen35-tokenizer"))


@pytest.fixture(scope="session")
def scripted(qwen35_tokenizer_dir):
    """The scripted-model server (see tests/server/scripted_server.py), started once per session."""
    from tests.server.scripted_server import ScriptedServer

    server = ScriptedServer(qwen35_tokenizer_dir)
    yield server
    server.close()
