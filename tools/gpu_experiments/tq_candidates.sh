# Issue 30's TurboQuant decode candidates, sourced by the call scripts (`. tools/gpu_experiments/tq_candidates.sh`):
# tq_decode_micro.py --candidates at TQ_SHAPES (default 9B; the shipped `spread` unpack vs `words` and its launch
# variations, one line each with µs, the ratio to bf16 and max|err| against the reference), bounded by T_MICRO_TQ
# seconds (default 100) with a TQ_BUDGET_S sweep budget (default 55). The table in $OUT/tq_decode_micro.log.
echo "== tq candidates $(date +%T)"
timeout "${T_MICRO_TQ:-100}" python3 tools/gpu_experiments/tq_decode_micro.py --candidates --budget-s "${TQ_BUDGET_S:-55}" \
  --shapes "${TQ_SHAPES:-9B}" > /dev/null 2> "$OUT/tq_micro_err.log"
echo "tq candidates exit $? $(date +%T)"; cut -c1-240 "$OUT/tq_decode_micro.log" 2>/dev/null
tail -5 "$OUT/tq_micro_err.log" | cut -c1-300
