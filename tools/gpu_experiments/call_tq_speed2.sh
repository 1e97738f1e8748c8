set -u
# Issue 30, branch tq-speed2: the TurboQuant decode attention's candidates (the shipped `spread` unpack against the
# `words` unpack with the `lane` shuffle, anna_xpu_kernels.turboquant_codes, and its launch variations) at the 9B,
# E4B-global and E4B-sliding shapes beside bf16 paged attention (batch 32, 4k, graph replays; one line each with
# us, ratio and max|err| against the reference; the best per shape and the projected steps), then the 9B decode
# step, bf16 and 4-bit with each unpack (ANNA_TURBOQUANT_DECODE=words-capped / words / spread) in one process. Logs in $OUT.
# About 280 s (TQ_CHECK=1 first runs the words decode's GPU conformance test: ~60 s more). Run: MODE=script SCRIPT=tools/gpu_experiments/call_tq_speed2.sh bash anna-core/src/anna_core/bench/h200_run.sh
if [ -n "${TQ_CHECK:-}" ]; then  # the lane shuffle against the reference on the GPU (~60 s more)
  timeout "${T_CHECK:-120}" python3 -m pytest -q -p no:cacheprovider tools/gpu_experiments/test_kernel_conformance_cuda.py \
    -k turboquant_words > "$OUT/tq_check.log" 2>&1
  echo "tq words check exit $?"; tail -3 "$OUT/tq_check.log" | cut -c1-300
fi
echo "== tq candidates $(date +%T)"
timeout "${T_MICRO_TQ:-125}" python3 tools/gpu_experiments/tq_decode_micro.py --candidates --budget-s "${TQ_BUDGET_S:-90}" \
  --shapes "${TQ_SHAPES:-9B,E4B-global,E4B-sliding}" > /dev/null 2> "$OUT/tq_micro_err.log"
echo "tq candidates exit $? $(date +%T)"; cut -c1-240 "$OUT/tq_decode_micro.log" 2>/dev/null
tail -5 "$OUT/tq_micro_err.log" | cut -c1-300
echo "== 9B step $(date +%T)"
timeout "${T_STEP:-150}" python3 tools/gpu_experiments/turboquant_bench.py --shapes Qwen3.5-9B --budget-gib 8 --context 4096 \
  --batch 32 --steps 32 --bits "${TQ_BITS:-4}" --tq-decodes "${TQ_DECODES:-words-capped,words,spread}" --no-capacity > "$OUT/tq_step.log" 2>&1
echo "turboquant_bench exit $? $(date +%T)"; grep '^{' "$OUT/tq_step.log"
grep -iE "error" "$OUT/tq_step.log" | cut -c1-300 | sort | uniq -c | head -5
echo "== done $(date +%T)"
