#!/usr/bin/env bash
# Issues 23/24 on the H200 after the moe_route op: the moe microbenchmarks (router and experts), the decode
# attention split sweep, then gemma4_bench.sh's RUNS (35B-A3B and 26B-A4B at batch 1 with HF side by side).
set -u
LOGS=$(mktemp -d)
timeout "${T_MICRO:-90}" python3 -m anna_xpu_kernels.microbench --only moe --moe-tokens 1,32 > "$LOGS/micro_moe.log" 2>&1
echo "microbench exit $?"; grep -vE "^\s*$" "$LOGS/micro_moe.log" | tail -30 | cut -c1-200
timeout "${T_SWEEP:-120}" python3 tools/gpu_experiments/attention_splits_sweep.py > "$LOGS/attn_sweep.log" 2>&1
echo "sweep exit $?"; cut -c1-220 "$LOGS/attn_sweep.log" | tail -16
tar czf "$OUT/route_logs.tgz" -C "$LOGS" .
bash tools/gpu_experiments/gemma4_bench.sh
