set -u
# Twenty-third session, a short call (about 400 s after install) when little device time is left: issue 27's speech
# figures (tts_bench, 1 and 16 concurrent, the reference in the same process when .whl_tts is carried), then issue
# 30's TurboQuant decode candidates (tq_decode_micro --candidates at the 9B shape: spread vs words, max|err| per line).
. tools/gpu_experiments/copy_bandwidth.sh
echo "== tts $(date +%T)"
T_TTS=${T_TTS:-230} bash tools/gpu_experiments/tts_bench.sh
echo "== tq candidates $(date +%T)"
timeout "${T_MICRO_TQ:-100}" python3 tools/gpu_experiments/tq_decode_micro.py --candidates --budget-s "${TQ_BUDGET_S:-55}" \
  --shapes "${TQ_SHAPES:-9B,E4B-global}" > /dev/null 2> "$OUT/tq_micro_err.log"
echo "tq candidates exit $? $(date +%T)"; cut -c1-240 "$OUT/tq_decode_micro.log" 2>/dev/null
tail -5 "$OUT/tq_micro_err.log" | cut -c1-300
echo "== done $(date +%T)"
