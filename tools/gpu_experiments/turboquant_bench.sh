#!/usr/bin/env bash
# Issue 30 on the GPU (MODE=script of anna_core/bench/h200_run.sh, or alone with PYTHONPATH set): the TurboQuant
# kernels' conformance on CUDA, then turboquant_bench.py (streams under a fixed KV budget and the batch-32, 4k-context
# decode step, bf16 vs 4 / 3 bits) at the Qwen3.5-9B shape and a Gemma 4 shape (SHAPES), then `anna bench` at batch
# 32 / 4k for each mode (the roofline and the kernels chosen). Logs in $OUT/turboquant.tgz, one JSON line per mode.
set -u
FINAL=$OUT; LOGS=${LOGS:-$(mktemp -d)}  # LOGS=$OUT/x: the logs land as they are written (an outer timeout keeps them)
timeout "${T_CONF:-300}" python3 -m pytest -q -p no:cacheprovider tools/gpu_experiments/test_kernel_conformance_cuda.py \
  -k turboquant > "$LOGS/conformance.log" 2>&1
echo "conformance exit $?"; tail -3 "$LOGS/conformance.log"
timeout "${T_BENCH:-1500}" python3 tools/gpu_experiments/turboquant_bench.py --shapes "${SHAPES:-Qwen3.5-9B,gemma-4-31B-it}" \
  --budget-gib "${BUDGET:-8}" ${DECODE_BUDGET:+--decode-budget-gib $DECODE_BUDGET} --context 4096 --batch 32 --steps 32 \
  ${RUN_STREAMS:+--run-streams} ${RESIDUAL:+--residual-len $RESIDUAL} > "$LOGS/turboquant.jsonl" 2> "$LOGS/turboquant.log"
echo "turboquant_bench exit $?"; cat "$LOGS/turboquant.jsonl"
grep -iE "error|capture fail" "$LOGS/turboquant.log" | cut -c1-300 | sort | uniq -c | head -5
if [ -n "${ANNA_BENCH:-}" ]; then
  for mode in "none" "turboquant:4" "turboquant:3"; do
    IFS=: read -r q bits <<< "$mode"
    timeout "${T_RUN:-300}" anna bench --model-dir tests/qwen35/reference_configs/Qwen3.5-9B --batch-size 32 \
      --input-len 4096 --output-len 64 --runs 2 --kv-cache-quantization "$q" ${bits:+--kv-cache-quant-bits $bits} \
      --json > "$LOGS/bench_$q$bits.json" 2> "$LOGS/bench_$q$bits.log"
    echo "== anna bench 9B b32 $mode exit $?"
    python3 -c "
import json; t=open('$LOGS/bench_$q$bits.json').read(); r=json.loads(t[t.index('{'):]) if '{' in t else {}
print({k: r.get(k) for k in ('kv_cache_quantization', 'decode_tokens_per_s_total', 'itl_ms_p50', 'roofline_fraction',
                             'graphs_captured', 'eager_steps')}, {k: v for k, v in (r.get('kernels') or {}).items()
                             if 'attention' in k or 'turboquant' in k})"
  done
fi
tar czf "$FINAL/turboquant.tgz" -C "$LOGS" .
