"""GPU experiment (issue 22): where a served step's time goes under ``anna serve``'s defaults.

Traces every engine step (host time of ``LLMEngine.step``, the runner's path, decodes / prefill rows in it)
and summarises each of issue 22's three serving scenarios (C / N / in / out = 1/8/128/128, 64/192/128/128,
16/64/512/32). Two modes, run from the repository root on the GPU machine:

``python3 tools/gpu_experiments/serve_trace.py http OUT_DIR -- SERVE_ARGS...``
    ``anna serve SERVE_ARGS`` in this process (its engine traced), driven by ``anna bench-serve`` subprocesses;
    with ``PYSPY=1`` a ``py-spy record --gil`` of the server during two scenarios (where the GIL goes).
``python3 tools/gpu_experiments/serve_trace.py inproc OUT_DIR MODEL_DIR [NAME:knob=v,knob=v ...]``
    the same load without HTTP: asyncio clients on an :class:`AsyncEngine` in this process, once per
    variant of engine settings (``base`` = the defaults), one loaded model.
"""
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from anna_core.engine.llm_engine import LLMEngine
from anna_core.engine.model_runner import ModelRunner
from anna_core.engine.scheduler import Scheduler

SCENARIOS = [("single", 1, 8, 128, 128), ("c64", 64, 192, 128, 128), ("ttft512", 16, 64, 512, 32)]
if os.environ.get("SMOKE"):  # a quick check of the script itself on the CPU
    SCENARIOS = [("single", 1, 2, 16, 8), ("c64", 4, 8, 16, 8), ("ttft512", 2, 4, 32, 4)]
DEVICE = os.environ.get("DEVICE", "cuda")
TRACE: list[tuple] = []  # (t0, t1, path, decodes, prefill seqs, prefill tokens, prompt hits, execute s)
_cur: dict = {}


def _install_trace() -> None:
    schedule, execute, step = Scheduler.schedule, ModelRunner.execute, LLMEngine.step

    def traced_schedule(self, now=None):
        out = schedule(self, now)
        dec = sum(1 for s in out.seqs if s.start >= s.request.num_prompt_tokens)
        _cur["seqs"] = (dec, len(out.seqs) - dec, sum(s.num_new_tokens for s in out.seqs
                                                    if s.start < s.request.num_prompt_tokens), len(out.prompt_hits))
        return out

    def traced_execute(self, out, **kw):
        t = time.perf_counter()
        r = execute(self, out, **kw)
        _cur["path"] = r.path.name
        _cur["exec"] = time.perf_counter() - t
        return r

    def traced_step(self):
        _cur.clear()
        t0 = time.perf_counter()
        r = step(self)
        t1 = time.perf_counter()
        d, p, pt, h = _cur.get("seqs", (0, 0, 0, 0))
        TRACE.append((t0, t1, _cur.get("path", "-"), d, p, pt, h, _cur.get("exec", 0.0)))
        return r

    Scheduler.schedule, ModelRunner.execute, LLMEngine.step = traced_schedule, traced_execute, traced_step


def _pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def summarize(w0: float, w1: float) -> dict:
    steps = [s for s in TRACE if w0 <= s[0] <= w1 and (s[3] or s[4] or s[6])]
    if not steps:
        return {"steps": 0}
    kinds: dict[str, list[float]] = {}
    for t0, t1, path, d, p, _pt, h, _ex in steps:
        kind = f"{path}:{'d' if d else ''}{'p' if p else ''}{'h' if h else ''}"
        kinds.setdefault(kind, []).append((t1 - t0) * 1e3)
    gaps = [(b[0] - a[1]) * 1e3 for a, b in zip(steps, steps[1:])]
    busy = sum(t1 - t0 for t0, t1, *_ in steps)
    batch = [s[3] + s[4] for s in steps]
    return {
        "steps": len(steps), "wall_s": round(w1 - w0, 3), "in_step_frac": round(busy / (w1 - w0), 3),
        "gap_ms_mean": round(statistics.fmean(gaps), 3) if gaps else None, "gap_ms_p99": round(_pct(gaps, .99), 3),
        "batch_mean": round(statistics.fmean(batch), 1), "prefill_tokens_per_prefill_step":
            round(statistics.fmean([s[5] for s in steps if s[5]] or [0]), 1),
        "kinds": {k: {"n": len(v), "ms_mean": round(statistics.fmean(v), 2), "ms_p50": round(_pct(v, .5), 2),
                      "ms_p99": round(_pct(v, .99), 2), "total_s": round(sum(v) / 1e3, 3)}
                  for k, v in sorted(kinds.items(), key=lambda kv: -sum(kv[1]))},
    }


# -- http mode --------------------------------------------------------------------------------------------

def _wait_up(port: int, limit_s: float = 300) -> bool:
    t = time.time()
    while time.time() - t < limit_s:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
            return True
        except Exception:
            time.sleep(1)
    return False


def _drive_http(out: Path, port: int) -> None:
    try:
        if not _wait_up(port):
            print("server not up", flush=True)
            return
        results = {}
        for name, c, n, i, o in SCENARIOS:
            spy = None
            if os.environ.get("PYSPY") and name in ("single", "c64"):
                spy = subprocess.Popen(["py-spy", "record", "--pid", str(os.getpid()), "--duration", "5", "--rate", "400",
                                        "--gil", "--threads", "--format", "raw", "--output", str(out / f"pyspy_{name}.txt"),
                                        "--nonblocking"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            w0 = time.perf_counter()
            cmd = ["anna", "bench-serve", "--base-url", f"http://127.0.0.1:{port}", "--prompt-token-ids", "--vocab-size",
                   os.environ.get("VOCAB", "150000"), "--json", "--concurrency", str(c), "--num-requests", str(n), "--input-len", str(i),
                   "--output-len", str(o), "--output", str(out / f"serve_{name}.json")]
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
            w1 = time.perf_counter()
            if spy is not None:
                try:
                    print(f"py-spy {name}:", spy.communicate(timeout=30)[0].decode()[-400:], flush=True)
                except Exception as exc:
                    print("py-spy failed", exc, flush=True)
            r = json.loads((out / f"serve_{name}.json").read_text())
            (out / f"serve_{name}.json").unlink()
            results[name] = {"client": _client(r), "engine": summarize(w0, w1)}
            print(name, json.dumps(results[name]), flush=True)
        (out / "serve_trace_http.json").write_text(json.dumps(results, indent=1))
    finally:
        os.kill(os.getpid(), 2)


def _client(r: dict) -> dict:
    return {"out_tok_s": round(r["output_tokens_per_s"], 1),
            "ttft": {k: round(v, 1) for k, v in r["ttft_ms"].items() if k in ("p50", "p95", "p99", "mean")},
            "itl": {k: round(v, 2) for k, v in r["itl_ms"].items() if k in ("p50", "p95", "p99", "mean")},
            "errors": r.get("errors")}


def http_mode(out: Path, serve_args: list[str]) -> None:
    import ctypes

    try:  # let a py-spy child attach to this process (Yama ptrace scope 1)
        ctypes.CDLL(None).prctl(0x59616D61, ctypes.c_ulong(-1), 0, 0, 0)
    except Exception as exc:
        print("prctl failed", exc)
    if os.environ.get("SWITCH_MS"):  # A/B of the interpreter's GIL switch interval (default 5 ms)
        sys.setswitchinterval(float(os.environ["SWITCH_MS"]) / 1e3)
    port = int(serve_args[serve_args.index("--port") + 1])
    threading.Thread(target=_drive_http, args=(out, port), daemon=True).start()
    from anna_cli.main import main
    try:
        main(["serve", *serve_args])
    except SystemExit:
        pass


# -- in-process mode --------------------------------------------------------------------------------------

async def _client_load(engine, c: int, n: int, i: int, o: int, vocab: int) -> dict:
    from anna_core.engine.sampling_params import SamplingParams

    rng = random.Random(0)
    todo = list(range(n))
    ttft, itl, toks = [], [], 0

    async def worker():
        nonlocal toks
        while todo:
            k = todo.pop()
            prompt = [rng.randrange(vocab) for _ in range(i)]
            t0 = time.perf_counter()
            last = None
            async for out in engine.generate(f"r{k}-{t0}", prompt, SamplingParams(max_tokens=o, temperature=0.0,
                                                                                   ignore_eos=True)):
                now = time.perf_counter()
                if out.delta_token_ids:
                    if last is None:
                        ttft.append((now - t0) * 1e3)
                    else:
                        itl.append((now - last) * 1e3)
                    last = now
                    toks += len(out.delta_token_ids)

    t = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(c)))
    wall = time.perf_counter() - t
    return {"out_tok_s": round(toks / wall, 1), "ttft": {"p50": round(_pct(ttft, .5), 1), "p95": round(_pct(ttft, .95), 1)},
            "itl": {"p50": round(_pct(itl, .5), 2), "p99": round(_pct(itl, .99), 2)}}


def _parse_variant(spec: str) -> tuple[str, dict]:
    name, _, knobs = spec.partition(":")
    kw = {}
    for item in filter(None, knobs.split(",")):
        k, v = item.split("=")
        kw[k] = {"true": True, "false": False}.get(v.lower(), None)
        if kw[k] is None:
            kw[k] = float(v) if "." in v else int(v)
    return name, kw


_split = ModelRunner.split


def inproc_mode(out: Path, model_dir: str, variants: list[str]) -> None:
    import gc

    import torch
    from anna_core.engine.async_engine import AsyncEngine
    from anna_core.engine.config import EngineConfig
    from anna_core.engine.model_runner import RunnerConfig
    from anna_core.loading import load_model
    from anna_core.tasks.generate import build

    loaded = load_model(Path(model_dir), device=DEVICE, dtype="bf16" if DEVICE == "cuda" else "float32", load_format="dummy")
    results = {}
    for spec in variants or ["base:"]:
        TRACE.clear()
        name, knobs = _parse_variant(spec)
        runner_knobs = {k: knobs.pop(k) for k in list(knobs) if k in ("max_prefill_replays", "compile_mode")}
        nosplit = knobs.pop("nosplit", False)  # A/B: the code before split steps (mixed steps eager)
        ModelRunner.split = (lambda self, out: None) if nosplit else _split
        t = time.perf_counter()
        engine = build(loaded, EngineConfig.from_profile(**knobs), RunnerConfig(**runner_knobs))
        print(f"[{name}] {knobs} built in {time.perf_counter() - t:.1f} s", flush=True)
        client = AsyncEngine(engine)
        client.start()
        res = {}
        for sname, c, n, i, o in SCENARIOS:
            w0 = time.perf_counter()
            r = asyncio.run(_client_load(client, c, n, i, o, loaded.model.vocab_size))
            w1 = time.perf_counter()
            res[sname] = {"client": r, "engine": summarize(w0, w1)}
            print(f"[{name}] {sname}", json.dumps(res[sname]), flush=True)
        results[name] = res
        asyncio.run(client.shutdown())
        del client, engine
        gc.collect()
        if DEVICE == "cuda":
            torch.cuda.empty_cache()
    (out / "serve_trace_inproc.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    _install_trace()
    mode, out_dir = sys.argv[1], Path(sys.argv[2])
    out_dir.mkdir(parents=True, exist_ok=True)
    if mode == "http":
        http_mode(out_dir, sys.argv[sys.argv.index("--") + 1:])
    else:
        inproc_mode(out_dir, sys.argv[3], sys.argv[4:])
