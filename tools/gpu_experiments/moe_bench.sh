#!/usr/bin/env bash
# Issues 23/24 on the H200: the Triton moe_experts check at the real shapes, then gemma4_bench.sh's RUNS
# (26B-A4B, 31B), then Qwen3.5-35B-A3B at batch 1 (QWEN_MOE=0 skips it). Logs in $OUT/moe_bench.tgz.
set -u
FINAL=$OUT; LOGS=$(mktemp -d)
timeout "${T_CHECK:-90}" python3 tools/gpu_experiments/moe_kernel_check.py --quick > "$LOGS/moe_check.log" 2>&1
echo "moe_kernel_check exit $?"; grep -E "^(check|sync|graph)" "$LOGS/moe_check.log" | cut -c1-260 | head -24
OUT=$FINAL bash tools/gpu_experiments/gemma4_bench.sh
if [ "${QWEN_MOE:-1}" = 1 ]; then
  timeout "${T_QWEN:-150}" anna bench --model-dir tests/qwen35/reference_configs/Qwen3.5-35B-A3B --batch-size 1 \
    --input-len 512 --output-len 128 --runs 2 --json > "$LOGS/q35moe_b1.json" 2> "$LOGS/q35moe_b1.log"
  echo "== Qwen3.5-35B-A3B b1 exit $?"
  python3 -c "
import json,sys; t=open('$LOGS/q35moe_b1.json').read()
r=json.loads(t[t.index('{'):]) if '{' in t else {}
print({k:r.get(k) for k in ('decode_tokens_per_s_per_stream','ttft_ms','graphs_captured','graph_steps','eager_steps','prefill_graph_steps','copy_bandwidth_gbps','roofline_fraction','step_bytes','kernels','served_vs_eager_match_tokens')})"
  grep -iE "capture fail|error" "$LOGS/q35moe_b1.log" | cut -c1-300 | sort | uniq -c | head -5
fi
tar czf "$FINAL/moe_bench.tgz" -C "$LOGS" .
