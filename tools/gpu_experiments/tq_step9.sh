# Issue 30's 9B batch-32 4k decode step, sourced by GPU call scripts (`. tools/gpu_experiments/tq_step9.sh`): bf16
# and 4 bits with the TQ_DECODES9 decodes (default words-chunked) and the `chain` and `columns` cache writes, bounded
# by T_STEP9 (default 200 s); the JSON lines and the log's tail printed, the log in $OUT/tq_step9.log.
echo "== 9B TurboQuant step $(date +%T)"
timeout "${T_STEP9:-200}" python3 tools/gpu_experiments/turboquant_bench.py --shapes Qwen3.5-9B --budget-gib 8 \
  --context 4096 --batch 32 --steps 32 --bits 4 --tq-decodes "${TQ_DECODES9:-words-chunked}" \
  --tq-writes chain,columns --no-capacity > "$OUT/tq_step9.log" 2>&1
echo "turboquant_bench exit $? $(date +%T)"; grep '^{' "$OUT/tq_step9.log"; grep -v '^{' "$OUT/tq_step9.log" | tail -3 | cut -c1-300
