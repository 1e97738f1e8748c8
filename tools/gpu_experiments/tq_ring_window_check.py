"""Issue 30 on a GPU: the TurboQuant residual ring's per-query window on the Triton kernel (``PER_QUERY``, the
multi-query path given the step's own rows ``new_k`` / ``new_v``), at the Qwen3.5-9B attention shape (16 / 4 heads,
head dim 256, 4 bits, a ring of 128).

  chunks      a 700-token prompt prefilled whole and in chunks of 100 and 300 (shorter and longer than the ring),
              as PagedAttention runs a ring (each chunk's first position written, the attention, the rest written):
              float32 q/k/v with ieee dots against the torch reference per chunk (expect <= 1e-4), and bf16 chunked
              against bf16 whole (expect bf16 rounding, <= ~2e-2)
  timing      one 2048-token prefill chunk over a 4096-token context, bf16: the per-query path against the same call
              without new_k / new_v (the ring-as-it-stands path), and a batch-32 decode over a ring (unchanged code)

Run from the repository root with the Anna wheels installed:

    timeout 280 python3 tools/gpu_experiments/tq_ring_window_check.py 2>&1 | tee $OUT/tq_ring_window.log

(~60-120 s: Triton compiles per shape). Exit status 1 when a float32 comparison exceeds 1e-4. ``--cpu`` runs the
comparisons at a small shape (head dim 32, ring 8, 60 tokens) under ``TRITON_INTERPRET=1``, no timing (a local check).
"""

from __future__ import annotations

import sys
import time

import torch
from anna_core.kernels.reference import turboquant as ref
from anna_core.kv_quant.layout import TurboQuantLayout
from anna_core.kv_quant.residual import ResidualRing, rotated_rows, write_residual
from anna_core.kv_quant.tables import TurboQuantTables
from anna_xpu_kernels import turboquant as tq
from anna_xpu_kernels import turboquant_write as tw

DEV = "cuda"
H_Q, H_KV, D, R, BS = 16, 4, 256, 128, 16


def prefill(n: int, chunk: int, dtype: torch.dtype, reference: bool, seed: int = 0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    q = torch.randn(n, H_Q, D, generator=g).to(DEV, dtype)
    k = torch.randn(n, H_KV, D, generator=g).to(DEV, dtype)
    v = torch.randn(n, H_KV, D, generator=g).to(DEV, dtype)
    layout = TurboQuantLayout(4, residual_len=R)
    t = TurboQuantTables.build(layout, D, DEV)
    nb = -(-n // BS)
    kq = torch.zeros(nb, BS, H_KV, layout.key_row_bytes(D), dtype=torch.uint8, device=DEV)
    vq = torch.zeros(nb, BS, H_KV, layout.value_row_bytes(D), dtype=torch.uint8, device=DEV)
    ring = ResidualRing.empty(1, 2, R, H_KV, D, DEV, dtype)
    table, slots = torch.arange(nb, dtype=torch.int32, device=DEV)[None], torch.tensor([0], device=DEV)
    got, want = [], []
    tuning = tq.TurboQuantTuning(dot="ieee") if dtype == torch.float32 else None
    for s in range(0, n, chunk):
        e = min(n, s + chunk)
        tw.turboquant_cache_write(k[s:e], v[s:e], kq, vq, torch.arange(s, e, device=DEV), *t.args)
        cu = torch.tensor([0, e - s], dtype=torch.int32, device=DEV)
        lens = torch.tensor([e], dtype=torch.int32, device=DEV)
        new = rotated_rows(k[s:e], v[s:e], t.rotation, dtype)
        args = (k[s:e], v[s:e], ring, 0, t.rotation, slots, cu, lens)
        write_residual(*args, part="first", rotated=new)
        call = (q[s:e], kq, vq, cu, lens, table, D ** -0.5, None, *t.args, ring.k[0], ring.v[0], ring.pos, slots,
                None, *new)
        got.append(tq.paged_attention_turboquant(*call, tuning=tuning).float())
        if reference:
            want.append(ref.paged_attention_turboquant(*call).float())
        write_residual(*args, part="rest", rotated=new)
    return torch.cat(got), (torch.cat(want) if reference else None)


def timed(fn, reps: int = 20) -> float:
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / reps * 1e3


def timing() -> None:
    ctx, chunk = 4096, 2048
    layout = TurboQuantLayout(4, residual_len=R)
    t = TurboQuantTables.build(layout, D, DEV)
    nb = ctx // BS
    g = torch.Generator(device="cpu").manual_seed(1)
    k = torch.randn(ctx, H_KV, D, generator=g).to(DEV, torch.bfloat16)
    v = torch.randn(ctx, H_KV, D, generator=g).to(DEV, torch.bfloat16)
    kq = torch.zeros(nb, BS, H_KV, layout.key_row_bytes(D), dtype=torch.uint8, device=DEV)
    vq = torch.zeros(nb, BS, H_KV, layout.value_row_bytes(D), dtype=torch.uint8, device=DEV)
    tw.turboquant_cache_write(k, v, kq, vq, torch.arange(ctx, device=DEV), *t.args)
    ring = ResidualRing.empty(1, 2, R, H_KV, D, DEV, torch.bfloat16)
    slots = torch.tensor([0], device=DEV)
    q = torch.randn(chunk, H_Q, D, generator=g).to(DEV, torch.bfloat16)
    cu = torch.tensor([0, chunk], dtype=torch.int32, device=DEV)
    lens = torch.tensor([ctx], dtype=torch.int32, device=DEV)
    table = torch.arange(nb, dtype=torch.int32, device=DEV)[None]
    new = rotated_rows(k[ctx - chunk:], v[ctx - chunk:], t.rotation, torch.bfloat16)
    base = (q, kq, vq, cu, lens, table, D ** -0.5, None, *t.args, ring.k[0], ring.v[0], ring.pos, slots, None)
    old_ms = timed(lambda: tq.paged_attention_turboquant(*base))
    new_ms = timed(lambda: tq.paged_attention_turboquant(*base, *new))
    print(f"timing prefill chunk {chunk} over {ctx}, bf16: ring as it stands {old_ms:.3f} ms, per-query window "
          f"{new_ms:.3f} ms ({new_ms / old_ms:.2f}x)")
    batch = 32
    qd = torch.randn(batch, H_Q, D, generator=g).to(DEV, torch.bfloat16)
    ringd = ResidualRing.empty(1, batch + 1, R, H_KV, D, DEV, torch.bfloat16)
    dec = (qd, kq, vq, torch.arange(batch + 1, dtype=torch.int32, device=DEV),
           torch.full((batch,), ctx, dtype=torch.int32, device=DEV), table.expand(batch, -1).contiguous(), D ** -0.5,
           None, *t.args, ringd.k[0], ringd.v[0], ringd.pos, torch.arange(batch, device=DEV), None)
    print(f"timing decode batch {batch} over {ctx} with a ring, bf16: {timed(lambda: tq.paged_attention_turboquant(*dec)):.3f} ms")


def main() -> int:
    global DEV, H_Q, H_KV, D, R
    small = "--cpu" in sys.argv
    if small:
        DEV, H_Q, H_KV, D, R = "cpu", 4, 2, 32, 8
    else:
        print(torch.cuda.get_device_name())
    ok = True
    n = 60 if small else 700
    chunks = (5, 20) if small else (100, 300)
    whole, want = prefill(n, n, torch.float32, True)
    err = (whole - want).abs().max().item()
    print(f"chunks float32 whole: kernel vs reference {err:.2e}")
    ok &= err <= 1e-4
    for chunk in chunks:
        got, want = prefill(n, chunk, torch.float32, True)
        e_ref, e_whole = (got - want).abs().max().item(), (got - whole).abs().max().item()
        print(f"chunks float32 chunk {chunk}: kernel vs reference {e_ref:.2e}, vs whole {e_whole:.2e}")
        ok &= e_ref <= 1e-4 and e_whole <= 1e-4
    whole16 = prefill(n, n, torch.bfloat16, False)[0]
    for chunk in chunks:
        got = prefill(n, chunk, torch.bfloat16, False)[0]
        print(f"chunks bf16 chunk {chunk}: vs whole {(got - whole16).abs().max().item():.2e} "
              f"(output scale {whole16.abs().max().item():.2f})")
    if not small:
        timing()
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
