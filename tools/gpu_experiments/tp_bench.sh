#!/usr/bin/env bash
# Issue 33 on a host with 2+ GPUs (nvidia-h100-x2 / h200-x2): Qwen3.5 shapes (bf16, random weights drawn
# identically at every size) at tensor-parallel sizes 1 and 2: batch-1 decode tok/s and roofline fraction
# (rank 0's step bytes against one GPU's copy bandwidth), TTFT of a 2048-token prompt, and whether the served
# tokens equal size 1's (tokens_sha256). MODEL=Qwen3.5-27B (default) or Qwen3.5-35B-A3B; BATCH=32 for the batch
# run (input 512). About 2 x 130 s. Logs in $OUT/tp_bench_<model>_b<batch>.tgz.
set -u
MODEL=${MODEL:-Qwen3.5-27B}; BATCH=${BATCH:-1}; INPUT=$([ "$BATCH" = 1 ] && echo 2048 || echo 512)
FINAL=$OUT; LOGS=$(mktemp -d)
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
for TP in 1 2; do
  timeout "${T_RUN:-140}" anna bench --model-dir "tests/qwen35/reference_configs/$MODEL" --load-format dummy \
    --batch-size "$BATCH" --input-len "$INPUT" --output-len 128 --runs 2 --tensor-parallel-size "$TP" --json \
    > "$LOGS/tp$TP.json" 2> "$LOGS/tp$TP.log"
  echo "== $MODEL tp=$TP batch=$BATCH exit $?"
  python3 -c "
import json; t=open('$LOGS/tp$TP.json').read()
r=json.loads(t[t.index('{'):]) if '{' in t else {}
print({k: r.get(k) for k in ('decode_tokens_per_s_per_stream', 'decode_tokens_per_s_total', 'ttft_ms', 'roofline_fraction',
      'copy_bandwidth_gbps', 'peak_memory_gib', 'graphs_captured', 'graph_steps', 'eager_steps', 'load_s', 'tokens_sha256',
      'first_tokens')})"
  grep -iE "error|capture fail|nccl warn" "$LOGS/tp$TP.log" | cut -c1-300 | sort | uniq -c | head -8
done
tar czf "$FINAL/tp_bench_${MODEL}_b${BATCH}.tgz" -C "$LOGS" .
