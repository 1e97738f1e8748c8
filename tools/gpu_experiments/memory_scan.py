"""GPU experiment (eighth session; BENCHMARKS.md): is device memory equally fast everywhere?

Some processes ran the Qwen3.5-2B decode step 11% slower than others on the same H200, from one layer
on: every GEMV after it, and the 1 GB LM head, read their weights 12-16% slower. This allocates most
of the free device memory in 1 GiB chunks and times a streaming read of each (a Triton kernel that only
loads and sums, so the figure is read bandwidth, not copy), twice, and prints each chunk's GB/s with its
virtual address. Chunks that are slow in both passes would point at physical placement. Run from the
repository root on the GPU machine: ``python3 tools/gpu_experiments/memory_scan.py [GiB to leave free]``."""
import sys

import torch
import triton
import triton.language as tl

CHUNK = 1 << 30  # bytes


@triton.jit
def _read(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(pid * BLOCK, n, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0, eviction_policy="evict_first").to(tl.float32)
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


def read_gbps(x: torch.Tensor, out: torch.Tensor, reps: int = 5) -> float:
    grid = (out.numel(),)
    _read[grid](x, out, x.numel(), BLOCK=2048, num_warps=8)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        _read[grid](x, out, x.numel(), BLOCK=2048, num_warps=8)
    end.record()
    torch.cuda.synchronize()
    return reps * x.numel() * x.element_size() / (start.elapsed_time(end) * 1e-3) / 1e9


def main(leave_gib: float) -> None:
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    out = torch.empty(sms * 4, device="cuda")
    free, total = torch.cuda.mem_get_info()
    n = int((free - leave_gib * CHUNK) // CHUNK)
    print(f"free {free / CHUNK:.1f} of {total / CHUNK:.1f} GiB; scanning {n} chunks of 1 GiB")
    if n < 1:
        raise SystemExit(f"less than {leave_gib + 1:.0f} GiB free: nothing to scan")
    chunks = [torch.ones(CHUNK // 2, dtype=torch.bfloat16, device="cuda") for _ in range(n)]
    passes = [[read_gbps(c, out) for c in chunks] for _ in range(2)]
    for i, c in enumerate(chunks):
        a, b = passes[0][i], passes[1][i]
        flag = "  SLOW" if max(a, b) < 0.93 * max(max(p) for p in passes) else ""  # slow in both passes
        print(f"chunk {i:3d} {c.data_ptr():#014x}  {a:7.0f} {b:7.0f} GB/s{flag}")
    allv = sorted(v for p in passes for v in p)
    print(f"min {allv[0]:.0f}  median {allv[len(allv) // 2]:.0f}  max {allv[-1]:.0f} GB/s")


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 8.0)
