set -u
# Twenty-fifth session, first GPU call (about 420 s with a warm cache): the decode graphs' staging (every model) on
# the 9B, Gemma 4 E2B's step tail (e2b_tail_check.sh runs N / O), then E2B with the fused q/k/v pre-processing +
# attention switches on (never measured: they timed out cold in the twenty-fourth session).
#   MODE=script SCRIPT=tools/gpu_experiments/call_s25_a.sh bash anna-core/src/anna_core/bench/h200_run.sh
. tools/gpu_experiments/copy_bandwidth.sh
echo "== 9B staging check $(date +%T)"
NRUNS=1 T_RUN=${T_9B:-45} RUNS="Qwen3.5-9B:1:512:128 Qwen3.5-9B:32:512:128" bash tools/gpu_experiments/gemma4_bench.sh 2>&1 \
  | grep -v "^kernels" | cut -c1-500
mv "$OUT/gemma4_bench.tgz" "$OUT/staging_9b.tgz" 2>/dev/null
echo "== E2B tail $(date +%T)"
BUDGET=${BUDGET_E2B:-150} bash tools/gpu_experiments/e2b_tail_check.sh
echo "== E2B fused pre-processing P $(date +%T)"
ANNA_Q_NORM_ROPE_ATTENTION=1 ANNA_QKV_NORM_ROPE_ATTENTION=1 NRUNS=1 T_RUN=${T_P:-110} RUNS="E2B:1:2048:128:timeline" \
  bash tools/gpu_experiments/gemma4_bench.sh 2>&1 | grep -v "^kernels" | cut -c1-400
mv "$OUT/gemma4_bench.tgz" "$OUT/e2b_fused_P.tgz" 2>/dev/null
echo "== done $(date +%T)"
