set -u
# Twenty-third session, the shortest useful call (about 230 s after install): issue 23's Gemma 4 E2B launch switches
# (gemma_launch_check.sh's C and A runs: every switch on / the code before them) and issue 30's TurboQuant decode
# candidates at the 9B shape (spread vs words, max|err| per line).
BUDGET=${BUDGET_G:-100} RUNS_B="" RUNS_E="" RUNS_D="" T_RUN=${T_RUN:-45} bash tools/gpu_experiments/gemma_launch_check.sh
T_MICRO_TQ=${T_MICRO_TQ:-80} TQ_BUDGET_S=${TQ_BUDGET_S:-795} TQ_SHAPES=${TQ_SHAPES:-9B} . tools/gpu_experiments/tq_candidates.sh
echo "== done $(date +%T)"
