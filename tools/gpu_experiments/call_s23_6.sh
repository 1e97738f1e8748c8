set -u
# Twenty-third session, the shortest useful call (about 230 s after install): issue 23's Gemma 4 E2B launch switches
# (gemma_launch_check.sh's C and A runs: every switch on / the code before them) and issue 30's TurboQuant decode
# candidates at the 9B shape (spread vs words, max|err| per line).
BUDGET=${BUDGET_G:-100} RUNS_B="" RUNS_E="" RUNS_D="" T_RUN=${T_RUN:-45} bash tools/gpu_experiments/gemma_launch_check.sh
echo "== tq candidates $(date +%T)"
timeout "${T_MICRO_TQ:-80}" python3 tools/gpu_experiments/tq_decode_micro.py --candidates --budget-s "${TQ_BUDGET_S:-40}" \
  --shapes "${TQ_SHAPES:-9B}" > /dev/null 2> "$OUT/tq_micro_err.log"
echo "tq candidates exit $? $(date +%T)"; cut -c1-240 "$OUT/tq_decode_micro.log" 2>/dev/null
tail -5 "$OUT/tq_micro_err.log" | cut -c1-300
echo "== done $(date +%T)"
