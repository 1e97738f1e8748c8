"""GPU check of a tensor-parallel group's faults (issue 33 review): 2 ranks over NCCL on ``cuda:0`` / ``cuda:1``.

Run from the repository root on a host with 2+ GPUs (nvidia-h100-x2), with the Anna wheels installed::

    timeout 280 python3 tools/gpu_experiments/tp_faults.py 2>&1 | tee $OUT/tp_faults.log

Loads Qwen3.5-0.8B's shapes with random weights (``--load-format dummy``, bf16, eager steps, no warm-up) with a
collective timeout of ``ANNA_TP_TIMEOUT_S`` (default 20 s), generates 8 greedy tokens, idles for the timeout plus
10 s, generates again (expected: the same tokens, both workers alive: the workers wait for the next plan without a
timeout), then kills rank 1 and submits one more request (expected: it ends with ``engine_degraded`` within a few
seconds, the engine's ``degraded`` names the failed tensor-parallel collective, a new request is refused with
``EngineDegradedError``; rank 0 does not hang in NCCL). ``ANNA_DEVICE=cpu ANNA_MODEL_DIR=<tiny Qwen3.5>`` runs
it on the CPU (gloo). Prints ``RESULT ok`` or ``RESULT FAIL <what>``; exit 0 / 1.
"""

from __future__ import annotations

import os
import sys
import time

TIMEOUT_S = float(os.environ.get("ANNA_TP_TIMEOUT_S", "20"))
MODEL_DIR = os.environ.get("ANNA_MODEL_DIR", "tests/qwen35/reference_configs/Qwen3.5-0.8B")
DEVICE = os.environ.get("ANNA_DEVICE", "cuda")  # "cpu" (with a tiny ANNA_MODEL_DIR) to try the script here


def main() -> int:
    from anna_core import SamplingParams
    from anna_core.distributed.launch import close_engine, load_engine
    from anna_core.engine.config import EngineConfig
    from anna_core.engine.model_runner import RunnerConfig
    from anna_core.errors import EngineDegradedError

    greedy = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    t0 = time.perf_counter()
    _, engine, workers = load_engine(
        MODEL_DIR, {"device": DEVICE, "dtype": "bf16" if DEVICE == "cuda" else "fp32", "load_format": "dummy"}, "anna_core.tasks.generate:build",
        EngineConfig(num_blocks=256), RunnerConfig(cuda_graph=False, warmup=False), tensor_parallel_size=2,
        timeout_s=TIMEOUT_S)
    print(f"loaded in {time.perf_counter() - t0:.1f} s", flush=True)

    def run(request_id: str, deadline_s: float = 60.0) -> list:
        engine.add_request(request_id, [5, 6, 7, 8, 9], greedy)
        outs, end = [], time.monotonic() + deadline_s
        while engine.has_unfinished() and time.monotonic() < end:
            outs += [o for o in engine.step() if o.finished]
        return outs

    failures = []
    [first] = run("a")
    print("first:", first.token_ids, first.finish_reason, flush=True)
    time.sleep(TIMEOUT_S + 10)
    alive = [p.is_alive() for p in workers.processes]
    [second] = run("b")
    print("after idling", TIMEOUT_S + 10, "s: workers alive", alive, "tokens", second.token_ids, flush=True)
    if not all(alive) or second.token_ids != first.token_ids:
        failures.append("idle group")
    workers.processes[0].kill()
    workers.processes[0].join()
    t1 = time.perf_counter()
    outs = run("c", deadline_s=TIMEOUT_S + 30)
    print(f"after the kill: {[(o.finish_reason, o.error_code) for o in outs]} in {time.perf_counter() - t1:.1f} s; "
          f"degraded: {engine.degraded}", flush=True)
    if not outs or outs[0].error_code != "engine_degraded" or not engine.degraded:
        failures.append("dead worker not degraded")
    try:
        engine.add_request("d", [1, 2], greedy)
        failures.append("a degraded engine took a request")
    except EngineDegradedError as exc:
        print("refused:", exc, flush=True)
    close_engine(engine, workers)
    print("RESULT", "ok" if not failures else "FAIL " + "; ".join(failures), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
