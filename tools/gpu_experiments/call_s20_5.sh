set -u
# Twentieth session, GPU call 5 (BENCHMARKS.md): issue 30 after the tq-speed kernel: the decode-attention
# microbenchmark (tq_decode_micro.py), then the 9B decode step / capacity bench (bf16 vs 4 / 3 bits); then, while the
# time lasts, issue 29's quantized-GEMV microbenchmark at one row. Logs land in $OUT as written. Through h200_run.sh.
echo "== tq micro $(date +%T)"
timeout "${T_MICRO_TQ:-120}" python3 tools/gpu_experiments/tq_decode_micro.py --budget-s "${TQ_SWEEP_S:-55}" > /dev/null 2> "$OUT/tq_micro_err.log"
echo "tq micro exit $? $(date +%T)"; cat "$OUT/tq_decode_micro.log" 2>/dev/null | cut -c1-220; tail -5 "$OUT/tq_micro_err.log" | cut -c1-300
echo "== tq bench $(date +%T)"
timeout "${T_BENCH:-200}" python3 tools/gpu_experiments/turboquant_bench.py --shapes "${SHAPES:-Qwen3.5-9B}" \
  --budget-gib 8 --context 4096 --batch 32 --steps 32 > "$OUT/tq.log" 2>&1
echo "turboquant_bench exit $? $(date +%T)"; grep '^{' "$OUT/tq.log"; grep -iE "error" "$OUT/tq.log" | cut -c1-300 | sort | uniq -c | head -5
echo "== wq micro $(date +%T)"
timeout "${T_WQ:-70}" python3 tools/gpu_experiments/wq_gemv_bench.py --model Qwen3.5-9B --rows 1 > "$OUT/wq_micro.log" 2>&1
echo "wq micro exit $? $(date +%T)"; grep -v "^\s*$" "$OUT/wq_micro.log" | tail -25 | cut -c1-250
