"""Issue 30 on a GPU: Gemma 4's KV-sharing layers on the TurboQuant residual ring's per-query window, with the Triton
kernels (the owner's held rows passed as ``new_k`` / ``new_v`` to the readers' ``paged_attention_turboquant``, the
readers' query norm + rotary in the ``q_norm_rope`` kernel) instead of the CPU's torch references.

For tiny random Gemma 4 E2B-style checkpoints (built here; one reader per owner: layers 4 and 5 read layers 3 and 2;
two readers per owner: 8 layers, 4..7 reading 3 and 2), 3-bit TurboQuant with an 8-position ring, a 45-token prompt
then 5 teacher-forced decode steps, it prints per case the largest logit difference between the prompt prefilled
whole and in chunks of 5 and 13 tokens (shorter and longer than the ring), at every position:

  float32   expected at float32 rounding (<= 1e-3; the readers' window ending at each chunk's end, before this
            change, gave ~0.5 on the CPU)
  bfloat16  printed only (bf16 rounding of the dots' operands; compare with the logits' scale printed beside it)

Exit status 1 when a float32 case exceeds 1e-3. Run from the repository root with the Anna wheels installed:

    timeout 280 python3 tools/gpu_experiments/tq_ring_shared_check.py 2>&1 | tee $OUT/tq_ring_shared.log

(~40-90 s on a fresh machine: Triton compiles the TurboQuant kernels per shape and dtype). ``--device cpu`` runs the
same over the torch references (a local sanity check). The captured decode and prefill graphs of the same model (its
readers holding rows inside a captured prefill) are covered by ``tq_ring_graphs_check.py --only-prefill``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch
from anna_core.kv_quant.layout import TurboQuantLayout
from anna_core.loading import load_model
from anna_core.testing.runner import prefill_logits
from anna_gemma4.tiny import build_tiny_gemma4

TWO_READERS = dict(num_hidden_layers=8, num_kv_shared_layers=4,
                   layer_types=["sliding_attention", "sliding_attention", "full_attention"] * 2
                   + ["sliding_attention", "full_attention"])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    if args.device == "cuda":
        print(torch.cuda.get_device_name())
    gen = torch.Generator().manual_seed(1234)
    ids = torch.randint(3, 320, (50,), generator=gen).tolist()
    prompt, forced = ids[:45], ids[45:]
    ring = TurboQuantLayout(3, residual_len=8)
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for name, overrides in (("one-reader", {}), ("two-readers", TWO_READERS)):
            path = build_tiny_gemma4(Path(tmp) / name, **overrides)
            for dtype in ("fp32", "bf16"):
                t0 = time.perf_counter()
                model = load_model(path, device=args.device, dtype=dtype).model
                whole = prefill_logits(model, prompt, kv_quant=ring, decode_ids=forced)
                plain = prefill_logits(model, prompt, kv_quant=TurboQuantLayout(3), decode_ids=forced)
                line = []
                for chunk in (5, 13):
                    got = prefill_logits(model, prompt, kv_quant=ring, decode_ids=forced, chunk_size=chunk)
                    err = (got - whole).abs().max().item()
                    line.append(f"chunk {chunk} {err:.2e}")
                    if dtype == "fp32":
                        ok &= err <= 1e-3
                print(f"{name} {dtype}: chunked vs whole max |logit diff| {', '.join(line)} (logit scale "
                      f"{whole.abs().max().item():.2f}; no ring vs ring {(plain - whole).abs().max().item():.2e}, "
                      f"the ring's effect)  [{time.perf_counter() - t0:.1f} s]")
    print("ALL OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
