set -u
# Twenty-third session, one bounded call (about 400 s after install) on whichever card comes: issue 23's Gemma 4 E2B
# launch switches A/B (gemma_launch_check.sh's C, B, A runs only: every switch on / the q/k/v opt-ins only / the code
# before the per-layer-inputs op), issue 30's TurboQuant decode candidates at the 9B shape (spread vs words,
# max|err| per line), then issue 27's speech figures without the reference (tts_bench, 1 and 16 concurrent).
# (gemma_launch_check.sh prints the card and its copy bandwidth first; its kernel benches get what is left of BUDGET)
BUDGET=${BUDGET_G:-140} RUNS_E="" RUNS_D="" bash tools/gpu_experiments/gemma_launch_check.sh
T_MICRO_TQ=${T_MICRO_TQ:-85} TQ_BUDGET_S=${TQ_BUDGET_S:-1039} TQ_SHAPES=${TQ_SHAPES:-9B} . tools/gpu_experiments/tq_candidates.sh
echo "== tts $(date +%T)"
REF=0 T_TTS=${T_TTS:-140} bash tools/gpu_experiments/tts_bench.sh
echo "== done $(date +%T)"
