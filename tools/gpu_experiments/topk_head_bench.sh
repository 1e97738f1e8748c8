#!/usr/bin/env bash
# Issue 29 on the GPU (run from the repository root with the Anna wheels installed, or PYTHONPATH set): the
# lm_head_topk conformance on CUDA (the op's sample inputs + a 32k-vocabulary case per layout: the op, the autotuned
# one-pass kernel, each one-pass configuration, the GEMV + selection), then topk_head_bench.py per head (full head +
# argmax, full head + torch.topk + logsumexp, one-pass, GEMV + selection, the op as tuned; T = 1 / 32, bf16 / int4 /
# fp8). Logs and $OUT/topk_head_bench.jsonl (one JSON line per case, appended as each finishes) land in $OUT.
# About 150-190 s on a fresh machine (Triton compiles every candidate once).
set -u
timeout "${T_CONF:-70}" python3 -m pytest -q -p no:cacheprovider tools/gpu_experiments/test_kernel_conformance_cuda.py \
  -k lm_head_topk > "$OUT/topk_conformance.log" 2>&1
echo "conformance exit $?"; tail -5 "$OUT/topk_conformance.log"
for head in qwen35-9b gemma4-e4b; do
  timeout "${T_HEAD:-60}" python3 tools/gpu_experiments/topk_head_bench.py --heads "$head" \
    > "$OUT/topk_head_bench_$head.log" 2>&1
  echo "bench $head exit $?"; grep '^{' "$OUT/topk_head_bench_$head.log" | cut -c1-700
done
