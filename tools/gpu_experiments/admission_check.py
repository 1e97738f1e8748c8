"""GPU check of memory admission (issue 31): under a low ``--max-estimated-usage-ratio`` an oversized request is
refused before it runs (HTTP 400 ``insufficient_memory``), a small one still runs.

Run from the repository root on the GPU machine (PYTHONPATH set to the packages' src folders)::

    ANNA_MODEL_DIR=/path/to/Qwen3.5-0.8B [ANNA_USAGE_RATIO=0.02|auto] python3 tools/gpu_experiments/admission_check.py

``ANNA_LOAD_FORMAT=dummy`` takes a config-only folder (random weights; token-id prompts; the HTTP half is
skipped, as the folder has no tokenizer).

Loads the model with ``LLM(..., max_estimated_usage_ratio=RATIO)`` (eager steps, no warm-up: quick; ``auto``, the
default, loads with 0.02 and then sets the ratio halfway, geometrically, between what the small and the
oversized request need, saying so), prints the admission's capacity and the estimates of a small request and of
an oversized one (``max_tokens`` up to ``max_model_len``) with the ratio each needs, then submits both twice: through
``LLMEngine.add_request`` and as ``POST /v1/completions`` to the app over the started ``AsyncEngine``
(litestar's in-process client). "refused before running" means the refusal came with the engine's step count
and the device's peak allocation unchanged. Exit status 0 when the oversized request was refused both times and
the small one ran.

Then an injected out-of-memory (``FaultInjector``) in a decode step of four requests: they fail with the
out-of-memory error, the tokens delivered before are correct, the next request matches a clean run, the gauges
return to 0. ``ANNA_GRAPHS=1`` loads with decode graphs and warm-up, so a launched step is in flight when the
fault hits (asynchronous scheduling); ``ANNA_REAL_OOM=1`` also fills the free device memory and runs a long
prompt (a real ``torch.OutOfMemoryError`` in the step), then checks the next request succeeds.
"""

from __future__ import annotations

import asyncio
import os
import sys

import attrs
import torch
from anna_core import LLM
from anna_core.engine.sampling_params import SamplingParams
from anna_core.errors import InvalidRequestError

MIB = 1 << 20


def main() -> int:
    model_dir = os.environ.get("ANNA_MODEL_DIR")
    if not model_dir:
        print("set ANNA_MODEL_DIR to a model folder", file=sys.stderr)
        return 2
    setting = os.environ.get("ANNA_USAGE_RATIO", "auto")
    ratio = 0.02 if setting == "auto" else float(setting)
    graphs = os.environ.get("ANNA_GRAPHS") == "1"  # decode graphs and asynchronous scheduling for the fault check
    load_format = os.environ.get("ANNA_LOAD_FORMAT", "auto")  # "dummy": a config-only folder, random weights
    llm = LLM(model_dir, cuda_graph=graphs, warmup=graphs, max_estimated_usage_ratio=ratio, load_format=load_format)
    engine = llm.engine
    adm = engine.admission
    prompt = (llm.tokenizer.encode("The capital of France is", add_special_tokens=True) if llm.tokenizer is not None
              else list(range(100, 106)))  # a config-only folder has no tokenizer: token ids
    small = SamplingParams(max_tokens=8, temperature=0.0)
    big = SamplingParams(max_tokens=engine.max_model_len - len(prompt) - 1, temperature=0.0, ignore_eos=True)
    est_small, est_big = engine.estimate_memory(prompt, small), engine.estimate_memory(prompt, big)
    total = adm.total_bytes or 0
    if setting == "auto" and total:
        lo, hi = ((adm.weights_bytes + e.total_bytes) / total for e in (est_small, est_big))
        ratio = min(1.0, (lo * hi) ** 0.5)
        adm.policy = attrs.evolve(adm.policy, max_estimated_usage_ratio=ratio)
        print(f"auto: max_estimated_usage_ratio set to {ratio:.5f} after loading (between {lo:.5f} and {hi:.5f})")
    print(f"device {engine.device}: total {total / MIB:.0f} MiB, ratio {ratio}, capacity "
          f"{(adm.capacity_bytes or 0) / MIB:.0f} MiB, weights {adm.weights_bytes / MIB:.0f} MiB, "
          f"max_model_len {engine.max_model_len}")
    for name, est in (("small", est_small), ("oversized", est_big)):
        print(f"  {name}: {est.total_bytes / MIB:.1f} MiB (cache groups "
              f"{[round(b / MIB, 1) for b in est.cache_bytes]} MiB, generation {est.generation_bytes / MIB:.1f} MiB); "
              f"fits a ratio of at least {(adm.weights_bytes + est.total_bytes) / max(total, 1):.4f}")

    ok = True
    steps, peak = engine.num_steps, torch.cuda.max_memory_allocated() if torch.cuda.is_available() else 0
    try:
        engine.add_request("oversized", prompt, big)
        print("LLMEngine: oversized request ADMITTED (not refused)")
        engine.abort_request("oversized")
        ok = False
    except InvalidRequestError as exc:
        unchanged = engine.num_steps == steps and (
            not torch.cuda.is_available() or torch.cuda.max_memory_allocated() == peak)
        print(f"LLMEngine: oversized request refused before running={unchanged} (code {exc.code}): {exc}")
        ok &= unchanged
    try:
        out = llm.generate(prompt, small)[0]
        print(f"LLMEngine: small request ran: finish {out.finish_reason}, {len(out.token_ids)} tokens")
        ok &= out.finish_reason != "error"
    except InvalidRequestError as exc:
        print(f"LLMEngine: small request refused too (raise ANNA_USAGE_RATIO): {exc}")
        ok = False
    if llm.tokenizer is not None:
        ok &= _http_check(llm, len(prompt))
    else:
        print("HTTP: skipped (no tokenizer in a config-only folder)")
    adm.policy = attrs.evolve(adm.policy, max_estimated_usage_ratio=1.0)  # the fault checks admit everything
    ok &= _fault_check(llm, prompt)
    if os.environ.get("ANNA_REAL_OOM") == "1":
        ok &= _real_oom_check(llm, prompt)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def _run(engine, requests: dict[str, tuple[list[int], SamplingParams]], arm_after: int | None = None):
    """Add ``requests``, step until done (arming one injected out-of-memory ``arm_after`` steps in); the finals."""
    for rid, (ids, params) in requests.items():
        engine.add_request(rid, ids, params)
    finals, n = {}, 0
    while engine.has_unfinished():
        if arm_after is not None and n == arm_after:
            engine.faults.arm(engine.num_steps + 1)
        for out in engine.step():
            if out.finished:
                finals[out.request_id] = out
        n += 1
    return finals


def _gauges_zero(engine) -> bool:
    snap = engine.metrics.snapshot()
    return (snap["requests"]["running"], snap["requests"]["waiting"], snap["kv_blocks"]["used"],
            snap["state_slots"]["used"]) == (0, 0, 0, 0)


def _fault_check(llm: LLM, prompt: list[int]) -> bool:
    """An injected out-of-memory in a decode step (a launched step in flight where graphs and asynchronous
    scheduling are on): only that step's requests fail, the next ones match a clean run, gauges return to 0."""
    from anna_core.engine.faults import FaultInjector

    engine = llm.engine
    engine.faults = FaultInjector()
    params = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    clean = _run(engine, {"clean": (prompt, params)})["clean"].token_ids
    failed = _run(engine, {f"f{i}": (prompt, params) for i in range(4)}, arm_after=6)
    only_step = all(o.finish_reason == "error" and "out of memory" in (o.error or "") for o in failed.values())
    prefix_ok = all(o.token_ids == clean[:len(o.token_ids)] for o in failed.values())
    after = _run(engine, {"after": (prompt, params)})["after"].token_ids
    good = only_step and prefix_ok and after == clean and _gauges_zero(engine) and engine.degraded is None
    print(f"injected OOM: failed {sorted(failed)} with errors={only_step}, delivered tokens correct={prefix_ok}, "
          f"next request correct={after == clean}, gauges 0={_gauges_zero(engine)}, degraded={engine.degraded}, "
          f"async in flight={engine.config.async_scheduling and engine.runner.graph_report()['decode'].get('captured')}")
    engine.faults = None
    return good


def _real_oom_check(llm: LLM, prompt: list[int]) -> bool:
    """A real device out-of-memory: fill the free memory, then run a long prompt; the request fails with an
    out-of-memory error, the hog is freed and the next request succeeds (ANNA_REAL_OOM=1)."""
    engine = llm.engine
    free, _ = torch.cuda.mem_get_info()
    try:
        hog = torch.empty(max(0, free - (32 << 20)), dtype=torch.uint8, device="cuda")
    except torch.OutOfMemoryError as exc:
        print(f"real OOM: could not fill the free memory ({exc}); skipped")
        return True
    long = (prompt * (engine.longest_one_step_prompt() // len(prompt) + 1))[:engine.longest_one_step_prompt()]
    got = _run(engine, {"oom": (long, SamplingParams(max_tokens=4, temperature=0.0))})["oom"]
    del hog
    print(f"real OOM: finish {got.finish_reason}, error {got.error!r}")
    after = _run(engine, {"after-oom": (prompt, SamplingParams(max_tokens=4, temperature=0.0))})["after-oom"]
    print(f"real OOM: next request finish {after.finish_reason}, gauges 0={_gauges_zero(engine)}, "
          f"step_failures {engine.stats()['step_failures']}")
    return after.finish_reason != "error" and _gauges_zero(engine)


def _http_check(llm: LLM, prompt_len: int) -> bool:
    """The same two requests over HTTP (the app over the started AsyncEngine, in process)."""
    from anna_core.engine.async_engine import AsyncEngine
    from anna_core.server.app import create_app
    from anna_core.server.state import ServerState
    from litestar.testing import TestClient

    engine = AsyncEngine(llm.engine)
    engine.start()
    state = ServerState(model_name="m")
    state.set_ready(engine, llm.tokenizer, max_model_len=llm.engine.max_model_len)
    body = {"model": "m", "prompt": "The capital of France is", "temperature": 0}
    try:
        with TestClient(create_app(state), raise_server_exceptions=False) as client:
            steps = llm.engine.num_steps
            big = client.post("/v1/completions", json=body | {"max_tokens": llm.engine.max_model_len - prompt_len - 1})
            refused = big.status_code == 400 and llm.engine.num_steps == steps
            print(f"HTTP: oversized -> {big.status_code} {big.json().get('error', {}).get('code')}, "
                  f"refused before running={refused}")
            small = client.post("/v1/completions", json=body | {"max_tokens": 8})
            print(f"HTTP: small -> {small.status_code}")
            print(f"HTTP: /healthz memory_admission {client.get('/healthz').json()['engine'].get('memory_admission')}")
            return refused and small.status_code == 200
    finally:
        asyncio.run(engine.shutdown(drain=False))


if __name__ == "__main__":
    sys.exit(main())
