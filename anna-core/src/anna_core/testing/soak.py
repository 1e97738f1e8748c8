"""A bounded loopback soak of a live ``anna serve``: mixed traffic, then the server must be back at rest.

    python -m anna_core.testing.soak --requests 2000 --concurrency 64 --cancel-fraction 0.3

The driver starts ``anna serve`` on a free loopback port (:mod:`anna_core.testing.live_server`; a tiny random
Qwen3.5 built in a temporary folder unless ``--model-dir`` names one) and sends ``--requests`` requests,
``--concurrency`` at a time, drawn from a seeded mix: chat and text completions, streamed and not, ``n`` > 1,
tools (``tool_choice`` auto, required, named), ``response_format`` ``json_schema`` / ``json_object``, stop
strings, prompt lists, and prompts near the context limit. A ``--cancel-fraction`` share of them is
cancelled: a stream closed after a few events, a plain request's connection closed while it waits.

It passes when every request the client did not cancel ended within ``--timeout-s`` (a status, and a
stream ended by ``[DONE]``), no answer was a 5xx, the server is alive, and, once the traffic stops, the
server is back at rest within ``--settle-s``: no request in flight, the engine's running / waiting gauges,
KV blocks and state slots used at 0, every request the engine received finished, and the server's
resident memory grew by at most ``--rss-growth-mib`` over the run (measured from after a warm-up).
The exit status is 0 on a pass, 1 on a failure; the report is printed as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import attrs
import httpx

from anna_core.testing.live_server import LiveServer, start_server

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                      "parameters": {"type": "object", "properties": {
                                          "city": {"type": "string"}, "days": {"type": "integer"}},
                                          "required": ["city"]}}},
    {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {
        "a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}}},
]
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                           "age": {"type": "integer"}, "ok": {"type": "boolean"}},
          "required": ["name", "age"], "additionalProperties": False}
WORDS = "the quick brown fox jumps over a lazy dog while seven tiny models stream tokens to many clients".split()


@attrs.frozen
class Plan:
    """One request of the mix.

    Attributes:
        index: its position in the run; path: ``/v1/chat/completions`` or ``/v1/completions``; body: the JSON
        body; kind: a short label for the report; cancel_after: None (run to the end), or for a stream the
        number of events read before closing it, for a plain request the seconds waited before closing.
    """

    index: int
    path: str
    body: dict[str, Any]
    kind: str
    cancel_after: float | None = None

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))


@attrs.define
class Outcome:
    """What happened to one request: ``status`` (None: no response), ``ended`` (a status and, for a 200 stream,
    ``[DONE]``), ``cancelled`` (the client closed it on purpose), ``events`` read, ``error`` (client side),
    ``detail``: the error message of an answer other than 200, ``finish_reasons`` of the choices answered,
    ``problem``: what is wrong with a 200 answer (:func:`answer_problem`), ``tool_calls`` answered."""

    plan: Plan
    status: int | None = None
    ended: bool = False
    cancelled: bool = False
    events: int = 0
    error: str | None = None
    seconds: float = 0.0
    detail: str | None = None
    finish_reasons: list[str] = attrs.field(factory=list)
    problem: str | None = None
    tool_calls: int = 0


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def make_plans(n: int, *, cancel_fraction: float, max_model_len: int, tokens_per_word: float,
               seed: int = 0) -> list[Plan]:
    """``n`` requests drawn from the mix with ``random.Random(seed)``; about ``cancel_fraction`` of them cancelled.

    ``tokens_per_word``: the served tokenizer's rate on :data:`WORDS` text, to size prompts near
    ``max_model_len``.
    """
    rng = random.Random(seed)
    plans = []
    for i in range(n):
        chat = rng.random() < 0.6
        stream = rng.random() < 0.5
        body: dict[str, Any] = {"max_tokens": rng.randint(1, 24), "temperature": rng.choice([0.0, 0.7, 1.0]),
                                "stream": stream, "seed": rng.randint(0, 2**31)}
        kind = "chat" if chat else "completion"
        roll = rng.random()
        prompt = _words(rng, rng.randint(1, 40))
        if roll < 0.08:  # near the context limit: a prompt of all but a few tokens of it
            prompt = _words(rng, max(1, int((max_model_len - 40) / max(tokens_per_word, 0.1))))
            body["max_tokens"] = rng.randint(1, 8)
            kind += "+long"
        elif roll < 0.2:
            body["n"] = rng.randint(2, 4)
            kind += "+n"
        elif roll < 0.28:
            body["stop"] = [rng.choice(WORDS), "\n"]
            kind += "+stop"
        if chat:
            body["messages"] = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": prompt}]
            extra = 1.0 if "long" in kind else rng.random()  # a long prompt leaves no room for tool schemas
            if extra < 0.15:
                body["tools"] = TOOLS
                body["tool_choice"] = rng.choice(["auto", "required", "none",
                                                  {"type": "function", "function": {"name": "add"}}])
                body["max_tokens"] = rng.randint(32, 192)  # a forced call takes ~100 tokens of the tiny vocabulary
                if rng.random() < 0.5:  # the grammar of a forced choice starts at once, not after the reasoning
                    body["chat_template_kwargs"] = {"enable_thinking": False}
                kind += "+tools"
            elif extra < 0.25:
                body["response_format"] = rng.choice([
                    {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}},
                    {"type": "json_object"}])
                body["max_tokens"] = rng.randint(16, 96)
                if rng.random() < 0.5:
                    body["chat_template_kwargs"] = {"enable_thinking": False}
                kind += "+json"
            elif extra < 0.3:
                body["chat_template_kwargs"] = {"enable_thinking": False}
                body["logprobs"], body["top_logprobs"] = True, 2
        else:
            body["prompt"] = [prompt, _words(rng, 3)] if rng.random() < 0.1 else prompt
            if rng.random() < 0.1:
                body["echo"] = True
        if stream and rng.random() < 0.5:
            body["stream_options"] = {"include_usage": True}
        cancel = None
        if rng.random() < cancel_fraction:
            cancel = float(rng.randint(0, 3)) if stream else rng.uniform(0.0, 0.3)
            kind += "+cancel"
        plans.append(Plan(i, "/v1/chat/completions" if chat else "/v1/completions", body, kind, cancel))
    return plans


async def run_one(client: httpx.AsyncClient, plan: Plan, timeout_s: float) -> Outcome:
    """Send ``plan`` and record how it ended (never raises)."""
    out = Outcome(plan)
    t0 = time.monotonic()
    try:
        async with asyncio.timeout(timeout_s):
            if plan.stream:
                await _stream(client, plan, out)
            elif plan.cancel_after is not None:
                task = asyncio.ensure_future(client.post(plan.path, json=plan.body))
                done, _ = await asyncio.wait({task}, timeout=plan.cancel_after)
                if task in done:
                    _answered(out, task.result())
                else:  # cancelling the task closes its connection mid-request
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
                    out.cancelled = True
            else:
                _answered(out, await client.post(plan.path, json=plan.body))
    except TimeoutError:
        out.error = f"no end within {timeout_s:.0f} s"
    except Exception as e:  # a transport error: the server dropped the connection
        out.error = f"{type(e).__name__}: {e}"
    out.seconds = time.monotonic() - t0
    return out


def _answered(out: Outcome, r: httpx.Response) -> None:
    out.status, out.ended = r.status_code, True
    if r.status_code == 200 and not out.plan.stream:
        body = r.json()
        out.finish_reasons = [c["finish_reason"] for c in body["choices"]]
        out.problem = answer_problem(out.plan, body)
        out.tool_calls = sum(len(c["message"].get("tool_calls") or ()) for c in body["choices"] if "message" in c)
    elif r.status_code != 200:
        try:
            out.detail = str(r.json()["error"]["message"])[:200]
        except Exception:
            out.detail = r.text[:200]


def _strict_json(text: str) -> Any:
    """``text`` as JSON, refusing ``NaN`` / ``Infinity``; raw control characters in strings are let through
    (xgrammar's JSON grammar emits them, as in vLLM)."""
    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse, strict=False)


def answer_problem(plan: Plan, body: dict[str, Any]) -> str | None:
    """What is wrong with a plain 200 chat answer, or None: tool-call arguments that are not JSON, a forced
    ``tool_choice`` (thinking off, no stop strings) that ended without a call, a ``response_format`` answer
    (thinking off, no stop strings) that ended but is not JSON."""
    thinking_off = plan.body.get("chat_template_kwargs", {}).get("enable_thinking") is False
    for choice in body.get("choices", ()):
        message = choice.get("message") or {}
        for call in message.get("tool_calls") or ():
            try:
                _strict_json(call["function"]["arguments"])
            except ValueError as e:
                return f"tool-call arguments are not JSON ({e}): {call['function']['arguments'][:200]!r}"
        if not thinking_off or choice["finish_reason"] == "length" or "stop" in plan.body:
            continue  # reasoning first, or cut (by the limit, or by a stop string inside the grammar's output)
        if plan.body.get("tool_choice") not in (None, "auto", "none") and not message.get("tool_calls"):
            return f"a forced tool_choice ended ({choice['finish_reason']}) without a call"
        if "response_format" in plan.body:
            try:
                _strict_json(message.get("content") or "")
            except ValueError as e:
                return f"a response_format answer is not JSON ({e}): {(message.get('content') or '')[:200]!r}"
    return None


async def _stream(client: httpx.AsyncClient, plan: Plan, out: Outcome) -> None:
    async with client.stream("POST", plan.path, json=plan.body) as r:
        out.status = r.status_code
        if r.status_code != 200:
            await r.aread()
            _answered(out, r)
            return
        if plan.cancel_after == 0:  # gone before the first event (while the prompt is computed)
            out.cancelled = True
            return
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                out.ended = True
                return
            event = json.loads(line[6:])  # every frame is one JSON object
            out.finish_reasons += [c["finish_reason"] for c in event.get("choices", ()) if c.get("finish_reason")]
            out.tool_calls += sum(1 for c in event.get("choices", ()) for t in (c.get("delta") or {}).get("tool_calls") or ()
                                  if t.get("id"))
            out.events += 1
            if plan.cancel_after is not None and out.events >= plan.cancel_after:
                out.cancelled = True
                return  # leaving the block closes the connection
    if plan.cancel_after is not None and not out.ended:
        out.cancelled = True


async def drive(base_url: str, plans: list[Plan], concurrency: int, timeout_s: float) -> list[Outcome]:
    """Run ``plans`` against ``base_url`` with at most ``concurrency`` in flight; outcomes in plan order."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    queue: asyncio.Queue[Plan] = asyncio.Queue()
    for p in plans:
        queue.put_nowait(p)
    outcomes: dict[int, Outcome] = {}
    async with httpx.AsyncClient(base_url=base_url, timeout=httpx.Timeout(timeout_s), limits=limits) as client:
        async def worker() -> None:
            while not queue.empty():
                plan = queue.get_nowait()
                outcomes[plan.index] = await run_one(client, plan, timeout_s)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return [outcomes[p.index] for p in plans]


def rss_mib(pid: int) -> float:
    """Resident memory of process ``pid`` in MiB (``VmRSS`` of ``/proc/PID/status``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def at_rest(healthz: dict[str, Any]) -> dict[str, Any]:
    """The figures of a ``/healthz`` body that must be back to 0 (and received == finished) after a run."""
    engine = healthz.get("engine") or {}
    requests = (healthz.get("metrics") or {}).get("requests", {})
    return {"in_flight": healthz.get("in_flight"), "running": engine.get("running"),
            "waiting": engine.get("waiting"), "kv_blocks_used": engine.get("kv_blocks_used"),
            "state_slots_used": engine.get("state_slots_used"),
            "unfinished": requests.get("received", 0) - requests.get("finished", 0)}


def wait_at_rest(base_url: str, settle_s: float) -> dict[str, Any]:
    """Poll ``/healthz`` until :func:`at_rest` is all zeros or ``settle_s`` passes; the last figures."""
    deadline = time.monotonic() + settle_s
    while True:
        figures = at_rest(httpx.get(f"{base_url}/healthz", timeout=10).json())
        if not any(figures.values()) or time.monotonic() > deadline:
            return figures
        time.sleep(0.2)


def tokens_per_word(base_url: str) -> float:
    """How many tokens the server's tokenizer makes of one word of :data:`WORDS` text."""
    text = " ".join(WORDS * 4)
    r = httpx.post(f"{base_url}/tokenize", json={"prompt": text, "add_special_tokens": False}, timeout=30)
    r.raise_for_status()
    return r.json()["count"] / len(WORDS * 4)


@attrs.define
class SoakReport:
    """The result of :func:`soak`: ``failures`` empty on a pass; ``refusals``: the commonest 4xx answers;
    ``finish_reasons``: how the choices answered ended; ``tool_calls``: calls answered."""

    requests: int
    concurrency: int
    seconds: float
    statuses: dict[str, int]
    cancelled: int
    kinds: dict[str, int]
    refusals: dict[str, int]
    finish_reasons: dict[str, int]
    tool_calls: int
    rest: dict[str, Any]
    rss_mib: dict[str, float]
    failures: list[str]

    @property
    def passed(self) -> bool:
        return not self.failures


def soak(server: LiveServer, *, requests: int, concurrency: int, cancel_fraction: float, seed: int = 0,
         timeout_s: float = 120.0, settle_s: float = 30.0, rss_growth_mib: float = 128.0) -> SoakReport:
    """Run the soak against a started ``server`` (see the module docstring for what passes)."""
    base = server.base_url
    max_model_len = httpx.get(f"{base}/v1/models", timeout=10).json()["data"][0]["max_model_len"]
    rate = tokens_per_word(base)
    warmup = make_plans(min(concurrency, requests), cancel_fraction=0.0, max_model_len=max_model_len,
                        tokens_per_word=rate, seed=seed + 1)
    asyncio.run(drive(base, warmup, concurrency, timeout_s))
    wait_at_rest(base, settle_s)
    rss_before = rss_mib(server.proc.pid)
    plans = make_plans(requests, cancel_fraction=cancel_fraction, max_model_len=max_model_len,
                       tokens_per_word=rate, seed=seed)
    t0 = time.monotonic()
    outcomes = asyncio.run(drive(base, plans, concurrency, timeout_s))
    seconds = time.monotonic() - t0
    failures = []
    for o in outcomes:
        if o.status is not None and o.status >= 500:
            failures.append(f"request {o.plan.index} ({o.plan.kind}) answered {o.status}")
        elif not o.cancelled and not o.ended:
            failures.append(f"request {o.plan.index} ({o.plan.kind}) did not end: {o.error or 'stream without [DONE]'}")
        elif o.problem:
            failures.append(f"request {o.plan.index} ({o.plan.kind}): {o.problem}")
    if server.proc.poll() is not None:
        failures.append(f"the server exited with {server.proc.returncode}")
    else:
        rest = wait_at_rest(base, settle_s)
        failures += [f"{name} = {value} after the run (expected 0)" for name, value in rest.items() if value]
        if httpx.get(f"{base}/health", timeout=10).status_code != 200:
            failures.append("/health is not 200 after the run")
    rss_after = rss_mib(server.proc.pid) if server.proc.poll() is None else float("nan")
    if rss_after - rss_before > rss_growth_mib:
        failures.append(f"server RSS grew {rss_after - rss_before:.0f} MiB (bound {rss_growth_mib:.0f} MiB)")
    statuses = Counter("none" if o.status is None else str(o.status) for o in outcomes)
    kinds = Counter(k for o in outcomes for k in o.plan.kind.split("+"))
    refusals = Counter(f"{o.status} {o.plan.kind}: {o.detail}" for o in outcomes if o.detail)
    return SoakReport(requests, concurrency, round(seconds, 2), dict(statuses), sum(o.cancelled for o in outcomes),
                      dict(kinds), dict(refusals.most_common(10)),
                      dict(Counter(f for o in outcomes for f in o.finish_reasons)), sum(o.tool_calls for o in outcomes),
                      rest if server.proc.poll() is None else {},
                      {"before": round(rss_before, 1), "after": round(rss_after, 1)}, failures[:50])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m anna_core.testing.soak", description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=2000, help="requests in the run (after a warm-up)")
    p.add_argument("--concurrency", type=int, default=64, help="requests in flight at once")
    p.add_argument("--cancel-fraction", type=float, default=0.3, help="share of requests the client cancels")
    p.add_argument("--model-dir", type=Path, default=None, help="what to serve (default: a tiny random Qwen3.5)")
    p.add_argument("--max-model-len", type=int, default=512, help="the served context (long prompts come near it)")
    p.add_argument("--seed", type=int, default=0, help="seed of the request mix")
    p.add_argument("--timeout-s", type=float, default=120.0, help="per-request limit")
    p.add_argument("--settle-s", type=float, default=30.0, help="how long the server may take to come to rest")
    p.add_argument("--rss-growth-mib", type=float, default=128.0, help="bound on the server's RSS growth")
    p.add_argument("--serve-arg", action="append", default=[], metavar="ARG", help="one more `anna serve` argument")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="anna-soak-") as tmp:
        model_dir = args.model_dir
        if model_dir is None:
            from anna_core.testing.checkpoints import build_tiny_qwen35

            model_dir = build_tiny_qwen35(Path(tmp) / "tiny-qwen35")
        server = start_server(["--model-dir", str(model_dir), "--max-model-len", str(args.max_model_len),
                               *args.serve_arg], Path(tmp), model_dir)
        try:
            report = soak(server, requests=args.requests, concurrency=args.concurrency,
                          cancel_fraction=args.cancel_fraction, seed=args.seed, timeout_s=args.timeout_s,
                          settle_s=args.settle_s, rss_growth_mib=args.rss_growth_mib)
        finally:
            server.kill()
        if not report.passed:
            print(server.log()[-4000:], file=sys.stderr)
    print(json.dumps(attrs.asdict(report) | {"passed": report.passed}, indent=2))
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
