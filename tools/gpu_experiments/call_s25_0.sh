set -u
# Twenty-fifth session, first GPU call (about 480 s with a warm cache): what the twenty-fourth session merged without a
# GPU, checked and timed on one card. Run from the repository root through h200_run.sh:
#   MODE=script SCRIPT=tools/gpu_experiments/call_s25_0.sh bash anna-core/src/anna_core/bench/h200_run.sh
# 1. the decode graphs' new staging (one upload, staged ids read in place: every model) on the main product:
#    Qwen3.5-9B batch 1 and 32 (served = eager tokens 16 of 16; tok/s against 227.5 / 5,083 of the twenty-fourth
#    session's H200 run);
# 2. Gemma 4 E2B's step tail (e2b_tail_check.sh: the fused greedy soft-cap head on / off, timelines; 536.0 before);
# 3. Qwen3-TTS after the predictor's norm fusions and one noise draw per frame (tts_cp_check.sh: golden codes on the
#    GPU, launches per frame, then tts_bench without the reference: RTF 0.0506, 16 concurrent 2.25x before).
. tools/gpu_experiments/copy_bandwidth.sh
echo "== 9B staging check $(date +%T)"
NRUNS=1 T_RUN=${T_9B:-45} RUNS="Qwen3.5-9B:1:512:128 Qwen3.5-9B:32:512:128" bash tools/gpu_experiments/gemma4_bench.sh 2>&1 \
  | grep -v "^kernels" | cut -c1-500
mv "$OUT/gemma4_bench.tgz" "$OUT/staging_9b.tgz" 2>/dev/null
echo "== E2B tail $(date +%T)"
BUDGET=${BUDGET_E2B:-150} bash tools/gpu_experiments/e2b_tail_check.sh
echo "== TTS $(date +%T)"
bash tools/gpu_experiments/tts_cp_check.sh
echo "== done $(date +%T)"
