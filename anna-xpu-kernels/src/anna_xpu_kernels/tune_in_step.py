"""Tune the decode GEMV's configurations in the whole captured decode step, not one launch alone.

The autotuner (:mod:`anna_xpu_kernels.gemv_tuning`) times each configuration of a shape in isolation,
with a cold L2 and nothing before or after it. In a decode step the launch overlaps its neighbours
(programmatic dependent launch: its programs start and load weights while the previous kernel
drains), so the configuration that wins alone need not win in the step. This tool measures in the
step itself: it loads a model with dummy weights, captures its batch-``b`` greedy decode graph, and for
each GEMV shape of the step (largest weight first) replays the graph with every candidate configuration
of that shape in turn (the others held at their current best), keeping a candidate only when the replay
is faster by more than ``--min-gain`` (coordinate descent, one pass). The result is written as the
device's table (:func:`anna_xpu_kernels.gemv_tuning.tuned_config` reads it). Only launches that take the
tiled kernel are tuned: at batch 1 the projections take the one-wave kernel
(:mod:`anna_xpu_kernels.gemv_persistent`) unless ``ANNA_GEMV_PERSISTENT=0`` or their K exceeds its limit.

    python -m anna_xpu_kernels.tune_in_step --model-dir tests/qwen35/reference_configs/Qwen3.5-2B \\
        [--model-dir ...] [--batch-size 1] [--out PATH]

CUDA only. Each trial recaptures the graph, so a model's sweep takes about a minute once the kernels
are compiled (the configurations the autotuner already compiled come from Triton's cache).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from anna_xpu_kernels import gemv, gemv_tuning
from anna_xpu_kernels.gemv_tuning import GemvConfig, TunedKey


def config_of(c: Any) -> GemvConfig:
    """A ``triton.Config`` of the GEMV's tuning space as a :class:`GemvConfig`."""
    kw = c.kwargs
    return GemvConfig(block_n=kw["BLOCK_N"], block_k=kw["BLOCK_K"], split_k=kw["SPLIT_K"], use_dot=kw["USE_DOT"],
                      num_warps=c.num_warps, num_stages=c.num_stages)


def candidates(key: TunedKey) -> list[GemvConfig]:
    """The tuning-space configurations the autotuner would time for ``key`` (after its pruning)."""
    _, block_m, n, k, _, _ = key
    kept = gemv_tuning.prune(gemv_tuning.tuning_space(), {"N": n, "K": k}, BLOCK_M=block_m)
    return [config_of(c) for c in kept]


def autotuned_keys(block_m: int) -> dict[TunedKey, GemvConfig]:
    """The shapes the GEMV autotuner has chosen for so far with ``BLOCK_M == block_m``, and its choices."""
    out = {}
    for key, cfg in gemv._gemv_kernel.cache.items():
        bm, n, k, prologue, epilogue = (int(v) for v in key[:5])
        dtype = next((str(v) for v in key[5:] if "bfloat16" in str(v) or "float" in str(v)), "?")
        if bm == block_m:
            out[(dtype.removeprefix("torch."), bm, n, k, prologue, epilogue)] = config_of(cfg)
    return out


def sweep(keys: dict[TunedKey, GemvConfig], time_step: Callable[[], float], min_gain: float,
          log: Callable[[str], None] = print) -> dict[TunedKey, GemvConfig]:
    """Coordinate descent over ``keys`` (largest ``N * K`` first): for each, every candidate with the
    other keys at their current best; a candidate replaces the current one when ``time_step()`` is lower
    by more than ``min_gain`` (a fraction). ``keys`` is updated in place and returned."""
    best_t = time_step()
    log(f"start: {best_t * 1e3:.1f} us per step")
    for key in sorted(keys, key=lambda k: -k[2] * k[3]):
        current = keys[key]
        for cand in candidates(key):
            if cand == current:
                continue
            keys[key] = cand
            try:
                t = time_step()
            except Exception as exc:  # noqa: BLE001 - e.g. a tile that does not fit: not a candidate
                log(f"  {key[2]}x{key[3]} p{key[4]} e{key[5]} {cand}: failed ({type(exc).__name__}: {exc})")
                continue
            better = t < best_t * (1 - min_gain)
            log(f"  {key[2]}x{key[3]} p{key[4]} e{key[5]} {cand}: {t * 1e3:.1f} us{'  <- best' if better else ''}")
            if better:
                best_t, current = t, cand
        keys[key] = current
        log(f"{key}: {current} ({best_t * 1e3:.1f} us)")
    return keys


def tune_model(model_dir: Path, batch_size: int, iters: int, min_gain: float,
               working: dict[TunedKey, GemvConfig]) -> dict[TunedKey, GemvConfig]:
    """Sweep one model's GEMV shapes in its batch-``batch_size`` decode step (``working`` is the table the
    launches read during the sweep); returns the configurations found."""
    from anna_core.bench.engine_bench import BenchSettings, build_engine
    from anna_core.engine.cuda_graphs import DecodeGraphs
    from anna_core.loading import load_model

    t0 = time.perf_counter()
    loaded = load_model(model_dir, device="cuda", dtype="bf16", load_format="dummy")
    engine = build_engine(loaded, BenchSettings(model_dir=model_dir, batch_size=batch_size, input_len=16,
                                                output_len=2, cuda_graph=False))
    runner = engine.runner
    width = -(-engine.max_model_len // runner.caches.block_size)

    def time_step() -> float:  # ms per replay of a freshly captured greedy graph
        graphs = DecodeGraphs(runner.model, runner.caches, runner.accel, max_batch=batch_size,
                              max_blocks_per_seq=width, vocab_size=loaded.model.vocab_size, modes=("greedy",))
        graphs.capture()
        return statistics.median(graphs.time_replay(batch_size, iters=iters) for _ in range(3))

    working.clear()
    gemv._gemv_kernel.cache.clear()  # only this model's shapes: an earlier model's are not in its step
    time_step()  # the autotuner chooses every shape of the step
    working.update(autotuned_keys(1 << (batch_size - 1).bit_length()))
    if not working:
        print(f"{model_dir.name}: no tiled GEMV launch in the batch-{batch_size} step (one-row projections take "
              "the one-wave kernel: use --batch-size 2..16, or ANNA_GEMV_PERSISTENT=0)", flush=True)
        return {}
    found = dict(sweep(working, time_step, min_gain, log=lambda s: print(s, flush=True)))
    working.clear()
    base = time_step()
    working.update(found)
    tuned = time_step()
    print(f"{model_dir.name}: autotuned {base * 1e3:.1f} us, tuned in step {tuned * 1e3:.1f} us per step "
          f"({100 * (base - tuned) / base:+.1f}%), {time.perf_counter() - t0:.0f} s", flush=True)
    return found


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--model-dir", type=Path, action="append", required=True)
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--iters", type=int, default=40, help="replays timed per trial (median)")
    ap.add_argument("--min-gain", type=float, default=0.003, help="fraction a candidate must save to be kept")
    ap.add_argument("--out", type=Path, default=None, help="table to write (default: the package's, for this device)")
    a = ap.parse_args(argv)

    device_name = torch.cuda.get_device_name()
    out = a.out or gemv_tuning.tuned_table_path(device_name)
    table = gemv_tuning.load_tuned_table(out)
    working: dict[TunedKey, GemvConfig] = {}
    original = gemv_tuning.tuned_config

    def lookup(x, block_m, n, k, prologue, epilogue):  # the sweep's table instead of the file's
        return working.get((str(x.dtype).removeprefix("torch."), block_m, n, k, prologue, epilogue))

    gemv_tuning.tuned_config = lookup
    try:
        for model_dir in a.model_dir:
            table.update(tune_model(model_dir, a.batch_size, a.iters, a.min_gain, working))
            torch.cuda.empty_cache()
    finally:
        gemv_tuning.tuned_config = original
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(gemv_tuning.dump_tuned_table(table, device_name))
    print(f"wrote {len(table)} configurations to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
