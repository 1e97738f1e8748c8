"""Launch configurations of the decode GEMV (:mod:`anna_xpu_kernels.gemv`) and how the autotuner picks one.

:class:`GemvConfig` is one configuration (tile sizes, split-K, CUDA-core or tensor-core accumulation,
warps, stages); :func:`tuning_space` the ones the autotuner times, :func:`prune` drops those that cannot
win for a shape before timing, and :func:`autotune_bench` times each with :func:`cold_time_ms`: CUDA
graph replays with a cold L2, as the weights of a decode step arrive (no host launch overhead).
:data:`FIXED` runs under Triton's interpreter, which cannot time anything.
"""

from __future__ import annotations

import attrs
import torch

from anna_xpu_kernels._triton import next_pow2, triton

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
    ``M > 2`` (its arithmetic grows with M), and tiles wider than the matrix."""
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
    return keep or [c for c in configs if c.kwargs["SPLIT_K"] == 1][:1]
