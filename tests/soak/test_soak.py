"""The loopback soak (:mod:`anna_core.testing.soak`) against a live ``anna serve`` of a tiny random Qwen3.5.

CI runs it reduced (150 requests, concurrency 16, 30% cancelled); ``ANNA_SOAK_SIZE=full`` runs the size
of issue 31 (2,000 requests, concurrency 64, 30% cancelled), as ``python -m anna_core.testing.soak`` does.
"""

from __future__ import annotations

import json

import attrs
import pytest
from anna_core.testing.soak import TOOLS, Plan, answer_problem, make_plans, soak

from tests.integration.conftest import start_server
from tests.soak.conftest import MAX_MODEL_LEN, SIZE

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SIZES = {"ci": {"requests": 150, "concurrency": 16}, "full": {"requests": 2000, "concurrency": 64}}


def test_the_mix_covers_every_kind_of_request():
    plans = make_plans(300, cancel_fraction=0.3, max_model_len=MAX_MODEL_LEN, tokens_per_word=1.5)
    kinds = {k for p in plans for k in p.kind.split("+")}
    assert kinds == {"chat", "completion", "long", "n", "stop", "tools", "json", "cancel"}
    assert {p.stream for p in plans} == {True, False}
    assert 0.2 < sum(p.cancel_after is not None for p in plans) / len(plans) < 0.4
    assert {p.body.get("tool_choice", {}).__class__.__name__ for p in plans if "tools" in p.kind} == {"str", "dict"}
    assert make_plans(50, cancel_fraction=0.3, max_model_len=512, tokens_per_word=1.5) == plans[:50]  # seeded


def test_soak_every_request_ends_and_the_server_comes_back_to_rest(tiny_qwen35_dir, tmp_path):
    server = start_server(["--model-dir", str(tiny_qwen35_dir), "--max-model-len", str(MAX_MODEL_LEN)],
                          tmp_path, tiny_qwen35_dir)
    try:
        report = soak(server, cancel_fraction=0.3, **SIZES[SIZE])
    finally:
        server.kill()
    print(json.dumps(attrs.asdict(report), indent=1))
    assert report.passed, "\n".join(report.failures) + "\n" + server.log()[-3000:]
    assert report.statuses.get("200", 0) > report.requests / 2
    assert report.cancelled > report.requests / 5


def test_answer_problems_are_caught():
    plan = Plan(0, "/v1/chat/completions", {"tools": TOOLS, "tool_choice": "required",
                                            "chat_template_kwargs": {"enable_thinking": False}}, "chat+tools")

    def answer(message, finish="stop"):
        return {"choices": [{"index": 0, "message": message, "finish_reason": finish}]}

    call = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": Infinity}'}}
    assert "not JSON" in answer_problem(plan, answer({"role": "assistant", "tool_calls": [call]}, "tool_calls"))
    assert "without a call" in answer_problem(plan, answer({"role": "assistant", "content": "hi"}))
    assert answer_problem(plan, answer({"role": "assistant", "content": "hi"}, "length")) is None
    call["function"]["arguments"] = '{"a": 1, "b": 2}'
    assert answer_problem(plan, answer({"role": "assistant", "tool_calls": [call]}, "tool_calls")) is None
    json_plan = Plan(1, "/v1/chat/completions", {"response_format": {"type": "json_object"},
                                                 "chat_template_kwargs": {"enable_thinking": False}}, "chat+json")
    assert "not JSON" in answer_problem(json_plan, answer({"role": "assistant", "content": '{"a": '}))
    assert answer_problem(json_plan, answer({"role": "assistant", "content": '{"a": "\x01"}'})) is None
