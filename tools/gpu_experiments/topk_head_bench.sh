#!/usr/bin/env bash
# Issue 29 on the GPU (run from the repository root with the Anna wheels installed, or PYTHONPATH set):
# topk_head_bench.py per head (full head + argmax, full head + torch.topk + logsumexp, the one-pass kernel as
# autotuned and each of its candidates' agreement, the GEMV + Triton selection, the op as its tuner chose, the
# selection alone per chunk width; T = 1 / 32, bf16 / int4 / fp8), then the lm_head_topk conformance on CUDA (the
# op's sample inputs + a 32k-vocabulary case per layout: op, one-pass, GEMV + selection). Logs and
# $OUT/topk_head_bench.jsonl (one JSON line per case, appended as each finishes) land in $OUT. Under 200 s; most of
# it is Triton compiling the candidates on a fresh machine (each case's line appears as it finishes).
set -u
for head in qwen35-9b gemma4-e4b; do
  timeout "${T_HEAD:-75}" python3 tools/gpu_experiments/topk_head_bench.py --heads "$head" \
    > "$OUT/topk_head_bench_$head.log" 2>&1
  echo "bench $head exit $?"; grep '^{' "$OUT/topk_head_bench_$head.log" | cut -c1-900
done
timeout "${T_CONF:-45}" python3 -m pytest -q -p no:cacheprovider tools/gpu_experiments/test_kernel_conformance_cuda.py \
  -k lm_head_topk > "$OUT/topk_conformance.log" 2>&1
echo "conformance exit $?"; tail -5 "$OUT/topk_conformance.log"
