set -u
# Twenty-third session, one call for whichever card comes (each part bounded; under ~560 s after install): issue 27's
# speech figures at the 1.7B shape (tts_bench, 1 and 16 concurrent, the reference in the same process when .whl_tts
# is carried), then issue 30's TurboQuant decode candidates (tq_decode_micro --candidates: spread vs words unpack at
# the 9B / E4B shapes, max|err| against the reference per line) and the 9B batch-32 step with the words and spread
# decodes (turboquant_bench --tq-decodes).
. tools/gpu_experiments/copy_bandwidth.sh
echo "== tts $(date +%T)"
T_TTS=${T_TTS:-240} bash tools/gpu_experiments/tts_bench.sh
T_MICRO_TQ=${T_MICRO_TQ:-120} TQ_BUDGET_S=${TQ_BUDGET_S:-1036} TQ_SHAPES=${TQ_SHAPES:-9B,E4B-global,E4B-sliding} . tools/gpu_experiments/tq_candidates.sh
echo "== 9B step $(date +%T)"
timeout "${T_STEP:-130}" python3 tools/gpu_experiments/turboquant_bench.py --shapes Qwen3.5-9B --budget-gib 8 --context 4096 \
  --batch 32 --steps 32 --bits 4 --tq-decodes "${TQ_DECODES:-words,spread}" --no-capacity > "$OUT/tq_step.log" 2>&1
echo "turboquant_bench exit $? $(date +%T)"; grep '^{' "$OUT/tq_step.log" | cut -c1-600
grep -iE "error" "$OUT/tq_step.log" | cut -c1-300 | sort | uniq -c | head -5
echo "== done $(date +%T)"
