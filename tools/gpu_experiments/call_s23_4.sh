set -u
# Twenty-third session, a short call (about 400 s after install) when little device time is left: issue 27's speech
# figures (tts_bench, 1 and 16 concurrent, the reference in the same process when .whl_tts is carried), then issue
# 30's TurboQuant decode candidates (tq_decode_micro --candidates at the 9B shape: spread vs words, max|err| per line).
. tools/gpu_experiments/copy_bandwidth.sh
echo "== tts $(date +%T)"
T_TTS=${T_TTS:-230} bash tools/gpu_experiments/tts_bench.sh
T_MICRO_TQ=${T_MICRO_TQ:-100} TQ_BUDGET_S=${TQ_BUDGET_S:-866} TQ_SHAPES=${TQ_SHAPES:-9B,E4B-global} . tools/gpu_experiments/tq_candidates.sh
echo "== done $(date +%T)"
