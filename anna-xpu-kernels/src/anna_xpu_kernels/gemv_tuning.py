"""Launch configurations of the decode GEMV (:mod:`anna_xpu_kernels.gemv`) and how the autotuner picks one.

:class:`GemvConfig` is one configuration (tile sizes, split-K, CUDA-core or tensor-core accumulation,
warps, stages); :func:`tuning_space` the ones the autotuner times, :func:`prune` drops those that cannot
win for a shape before timing, and :func:`autotune_bench` times each with :func:`cold_time_ms`: CUDA
graph replays with a cold L2, as the weights of a decode step arrive (no host launch overhead).
:data:`FIXED` runs under Triton's interpreter, which cannot time anything.

Timed alone, a launch is not timed as it runs in a decode step, where (with programmatic dependent
launch) it overlaps the kernels around it. :func:`tuned_config` therefore first looks the shape up in a
table measured in the whole captured step for the device (``tuned/gemv_<device>.json``, written by
``python -m anna_xpu_kernels.tune_in_step``); shapes it does not list are autotuned. No table ships yet:
the 2B step's in-step picks measured within the run-to-run spread of the autotuner's (BENCHMARKS.md),
and the one-wave kernel
(:mod:`anna_xpu_kernels.gemv_persistent`) now serves every one-row shape they covered.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import attrs
import torch

from anna_xpu_kernels._triton import INTERPRETING, next_pow2, triton

MAX_SPLIT_N = 16384
"""Split-K is only tuned for ``N`` up to this (the workspace is ``SPLIT_K * M * N`` float32)."""


@attrs.frozen
class GemvConfig:
    """One launch configuration of the GEMV kernel (what the autotuner chooses among)."""

    block_n: int
    block_k: int
    split_k: int = 1
    use_dot: bool = False
    num_warps: int = 4
    num_stages: int = 3

    def triton(self) -> triton.Config:
        return triton.Config({"BLOCK_N": self.block_n, "BLOCK_K": self.block_k, "SPLIT_K": self.split_k,
                              "USE_DOT": self.use_dot}, num_warps=self.num_warps, num_stages=self.num_stages)


TUNED_DIR = Path(__file__).parent / "tuned"
"""Where the per-device tables of :func:`tuned_config` live (package data)."""


def tuned_table_path(device_name: str) -> Path:
    """The table file of a device: ``"NVIDIA H200"`` -> ``tuned/gemv_nvidia_h200.json``."""
    return TUNED_DIR / f"gemv_{re.sub(r'[^a-z0-9]+', '_', device_name.lower()).strip('_')}.json"


TunedKey = tuple[str, int, int, int, int, int]
"""``(dtype, BLOCK_M, N, K, PROLOGUE, EPILOGUE)``, dtype as ``"bfloat16"``."""


def load_tuned_table(path: Path) -> dict[TunedKey, GemvConfig]:
    """A table file's configurations by key; empty when the file does not exist.

    Raises:
        ValueError: the file is not a table (bad JSON, missing fields).
    """
    if not path.exists():
        return {}
    try:
        entries = json.loads(path.read_text())["configs"]
        return {(e["dtype"], int(e["block_m"]), int(e["n"]), int(e["k"]), int(e["prologue"]), int(e["epilogue"])):
                GemvConfig(**e["config"]) for e in entries}
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path} is not a GEMV tuning table: {exc}") from exc


def dump_tuned_table(table: dict[TunedKey, GemvConfig], device_name: str) -> str:
    """The JSON text of a table (:func:`load_tuned_table` reads it back)."""
    entries = [{"dtype": k[0], "block_m": k[1], "n": k[2], "k": k[3], "prologue": k[4], "epilogue": k[5],
                "config": attrs.asdict(c)} for k, c in sorted(table.items())]
    return json.dumps({"device": device_name, "configs": entries}, indent=1) + "\n"


@functools.cache
def _device_table(device_index: int) -> dict[TunedKey, GemvConfig]:
    return load_tuned_table(tuned_table_path(torch.cuda.get_device_name(device_index)))


def tuned_config(x: torch.Tensor, block_m: int, n: int, k: int, prologue: int, epilogue: int) -> GemvConfig | None:
    """The configuration measured in the decode step for this shape on ``x``'s CUDA device, or None (not
    listed, not CUDA, or under the interpreter): the autotuner decides then."""
    if INTERPRETING or x.device.type != "cuda":
        return None
    index = x.device.index if x.device.index is not None else torch.cuda.current_device()
    table = _device_table(index)
    return table.get((str(x.dtype).removeprefix("torch."), block_m, n, k, prologue, epilogue)) if table else None


def tuning_space() -> list[triton.Config]:
    """Tiles that won a sweep over the Qwen3.5 0.8B/2B/9B decode shapes on an H200 (CUDA-core tiles
    for one row, tensor-core tiles for more rows and for the LM head), each with and without split-K."""
    space = []
    for split in (1, 2, 4, 8):
        for bn, bk, warps, stages in ((4, 512, 2, 3), (8, 256, 2, 3), (8, 512, 4, 3), (16, 256, 4, 3),
                                      (16, 512, 4, 3)):
            space.append(GemvConfig(bn, bk, split, False, warps, stages).triton())
        for bn, bk, warps, stages in ((64, 128, 4, 3), (128, 128, 4, 3), (64, 256, 4, 3), (64, 64, 4, 6)):
            space.append(GemvConfig(bn, bk, split, True, warps, stages).triton())
    return space


def cold_time_ms(fn, reps: int = 16, flush_bytes: int = 128 << 20) -> float:
    """Milliseconds per call of ``fn`` with a cold L2, without host launch overhead (CUDA only).

    Captures ``reps`` x (L2 flush, ``fn``) in one CUDA graph and ``reps`` flushes alone in another;
    the difference of their median replay times over ``reps`` is ``fn``'s device time on weights
    that come from memory, as in a decode step (``triton.testing.do_bench`` times eager launches, whose
    host overhead exceeds these kernels' few microseconds).
    """
    fn()
    flush = torch.empty(flush_bytes // 4, dtype=torch.int32, device="cuda")
    graphs = [torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()]
    for with_fn, graph in zip((True, False), graphs):
        with torch.cuda.graph(graph):
            for _ in range(reps):
                flush.zero_()
                if with_fn:
                    fn()
    times: list[list[float]] = [[], []]
    for _ in range(5):
        for i, graph in enumerate(graphs):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times[i].append(start.elapsed_time(end))
    both, alone = (sorted(t)[len(t) // 2] for t in times)
    return max(both - alone, 1e-4) / reps


def autotune_bench(kernel_call, quantiles):
    """The autotuner's timer: :func:`cold_time_ms` on CUDA, ``triton.testing.do_bench`` elsewhere."""
    if torch.cuda.is_available():
        t = cold_time_ms(kernel_call)
        return [t for _ in quantiles] if quantiles else t
    return triton.testing.do_bench(kernel_call, quantiles=quantiles)


FIXED = GemvConfig(block_n=16, block_k=32, split_k=1, use_dot=False, num_warps=4)
"""The configuration run under the interpreter."""


def prune(configs, named_args, **kwargs):
    """Drop configurations that cannot win: split-K for wide N or short K, the CUDA-core path for
    ``M > 2`` (its arithmetic grows with M), and tiles wider than the matrix. Where nothing is left, the first
    unsplit configuration; above 8 rows the first unsplit tensor-core one (a CUDA-core
    tile would hold a ``[16, BLOCK_N, BLOCK_K]`` float32 product in registers)."""
    n, k, block_m = named_args["N"], named_args["K"], kwargs["BLOCK_M"]
    keep = []
    for c in configs:
        kw = c.kwargs
        split = kw["SPLIT_K"]
        if split > 1 and (n > MAX_SPLIT_N or k < split * kw["BLOCK_K"] * 2):
            continue
        if not kw["USE_DOT"] and block_m > 2:
            continue
        if kw["BLOCK_N"] > max(16, next_pow2(n)) or kw["BLOCK_K"] > max(32, next_pow2(k)):
            continue
        keep.append(c)
    if keep:
        return keep
    unsplit = [c for c in configs if c.kwargs["SPLIT_K"] == 1]
    return [c for c in unsplit if c.kwargs["USE_DOT"] or block_m <= 8][:1] or unsplit[:1]
