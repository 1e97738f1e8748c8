"""Issue 27 on a GPU: the captured samplers' Gumbel noise at its float32 edge. ``uniform_noise`` used to return
exactly 1.0 for one hash value in 2**24 ((2**24 - 1) + 0.5 rounds to 2**24 in float32), where ``-log(-log(u))`` is
``+inf`` and a masked ``-inf`` logit plus it is NaN, which ``argmax`` picks: the speech talker drew blocked control ids
(2269 of a 2048-code book at 16 concurrent requests). This checks, on the device:

1. at the edge (seed 0, output step 3408, id 2720 of a 3072-id talker vocabulary, blocked), ``sample_no_sync``,
   ``sample_plain_no_sync``, ``sample_topk_no_sync`` and the eager ``Sampler`` draw the same allowed id;
2. over 8192 output steps x 16 seeds x 3072 ids, the noise stays in (0, 1), and how many entries sit at the edge
   (about one in 2**24 expected; each was a possible masked draw before the fix);
3. 16 rows x 4096 steps of ``sample_no_sync`` over the talker's mask (codes < 2048, EOS 2150) draw no blocked id.

Prints one line per check and exits 1 on a failure. Run from the repo root with the Anna wheels installed (about
10-20 s; bound it)::

    timeout 120 python3 tools/gpu_experiments/tts_codes_check.py | tee $OUT/tts_codes_check.log

then the failing benchmark itself (EOS ignored, random weights; every 16-concurrent request must complete)::

    timeout 280 python -m anna_audio.tts_bench --shape Qwen3-TTS-12Hz-1.7B-Base --dtype bf16 --frames 125 \\
        --concurrency 16 --runs 2 --out $OUT/tts_bench_c16.json 2>&1 | tail -40 | tee $OUT/tts_bench_c16.log

``DEVICE=cpu`` runs the checks on the CPU.
"""

from __future__ import annotations

import os
import sys

import torch
from anna_core.engine.request import Request
from anna_core.engine.sampler import Sampler, sample_no_sync, sample_plain_no_sync, sample_topk_no_sync, uniform_noise
from anna_core.engine.sampling_params import SamplingParams

DEVICE = torch.device(os.environ.get("DEVICE", "cuda"))
V, CODES, EOS = 3072, 2048, 2150
EDGE_SEED, EDGE_STEP, EDGE_ID = 0, 3408, 2720
DRAW_STEPS = 4096 if DEVICE.type == "cuda" else 16  # check 3 (the CPU only checks the script)


def talker_logits(rows: int, gen: torch.Generator) -> torch.Tensor:
    logits = torch.randn(rows, V, generator=gen, device="cpu").to(DEVICE) * 2
    logits[:, CODES:] = float("-inf")
    logits[:, EOS] = 0.5
    return logits


def main() -> int:
    ok = True
    gen = torch.Generator().manual_seed(0)
    one = lambda v, dt=torch.float32: torch.tensor([v], dtype=dt, device=DEVICE)  # noqa: E731
    logits = talker_logits(1, gen)
    temp, seeds, steps = one(0.9), one(EDGE_SEED, torch.int64), one(EDGE_STEP, torch.int64)
    k, p, m = one(50, torch.int64), one(1.0), one(0.0)
    full = sample_no_sync(logits, temp, one(V, torch.int64), p, m, seeds, steps).item()
    plain = sample_plain_no_sync(logits, temp, seeds, steps).item()
    req = Request("x", [1], SamplingParams(temperature=0.9), seed=EDGE_SEED)
    req.output_token_ids = [0] * EDGE_STEP
    eager = Sampler()(logits.clone(), [req]).item()
    values, indices = logits.topk(64, dim=-1)
    topk50 = sample_no_sync(logits, temp, k, p, m, seeds, steps).item()
    cand = sample_topk_no_sync(values, indices, temp, k, p, m, seeds, steps)[0].item()
    good = full < CODES or full == EOS
    ok &= good and plain == full and eager == full and cand == topk50 and topk50 in indices[0, :50].tolist()
    print(f"edge draw: full {full} plain {plain} eager {eager} (allowed: {good}); top-k 50: full {topk50} "
          f"candidates {cand}")

    edge, lo, hi = 0, 1.0, 0.0
    for seed in range(16):
        u = uniform_noise(torch.full((8192,), seed, dtype=torch.int64, device=DEVICE),
                          torch.arange(8192, device=DEVICE), V)
        edge += int((u == 1.0 - 2.0**-24).sum())
        lo, hi = min(lo, u.min().item()), max(hi, u.max().item())
    in_range = 0.0 < lo and hi < 1.0
    ok &= in_range
    print(f"noise over 16 x 8192 x {V}: min {lo:.3e} max 1 - {1 - hi:.3e} (in (0, 1): {in_range}); "
          f"{edge} entries at the edge (expected ~{16 * 8192 * V / 2**24:.1f})")

    rows, bad = 16, 0
    logits = talker_logits(rows, gen)
    t, kk = torch.full((rows,), 0.9, device=DEVICE), torch.full((rows,), 50, dtype=torch.int64, device=DEVICE)
    pp, mm = torch.ones(rows, device=DEVICE), torch.zeros(rows, device=DEVICE)
    sd = torch.arange(rows, dtype=torch.int64, device=DEVICE) * 7919
    for step in range(DRAW_STEPS):
        ids = sample_no_sync(logits, t, kk, pp, mm, sd, torch.full((rows,), step, dtype=torch.int64, device=DEVICE))
        bad += int(((ids >= CODES) & (ids != EOS)).sum())
    ok &= bad == 0
    print(f"talker-masked draws, {rows} rows x {DRAW_STEPS} steps: {bad} blocked ids")
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    with torch.inference_mode():
        sys.exit(main())
