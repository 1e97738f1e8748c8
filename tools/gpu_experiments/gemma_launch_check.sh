set -u
# Issue 23, Gemma 4 E2B / E4B batch-1 decode launches per layer: the split merge inside the decode attention launch
# (ANNA_ATTENTION_FUSED_MERGE) and the opt-in fused q/k/v pre-processing kernels, A/B'd one process per setting, each
# run with the served step's kernel timeline (`anna bench --timeline`). Through h200_run.sh (MODE=script), from the
# repository root; bounded under ~245 s in all (40 s the sweep, 40 s each run) (each part has its own timeout; cold Triton compiles eat into them):
#   MODE=script SCRIPT=tools/gpu_experiments/gemma_launch_check.sh bash anna-core/src/anna_core/bench/h200_run.sh
# Parts (RUNS_* override the runs of a part, "" skips it):
#   1. kernel level (attention_splits_sweep.py): attention + merge kernel per split count against the fused merge at
#      8 / 16 / 32 splits, E2B and E4B decode shapes (graph replays);
#   2. E2B then E4B, batch 1, 2048-token prompt, 128 new tokens: A = the defaults, B = the fused q/k/v
#      pre-processing (ANNA_Q_NORM_ROPE_ATTENTION=1 ANNA_QKV_NORM_ROPE_ATTENTION=1), C = B + the fused merge
#      (ANNA_ATTENTION_FUSED_MERGE=1: at most 16 splits); what to read: decode tok/s per run and the timeline's
#      kernel count and `_merge_splits_kernel` line (gone in C) against `_paged_attention_kernel`'s exposed time.
. tools/gpu_experiments/copy_bandwidth.sh
START=$SECONDS
echo "== attention split sweep $(date +%T)"
timeout "${T_SWEEP:-40}" python3 tools/gpu_experiments/attention_splits_sweep.py --only "E2B sliding ctx640,E2B global ctx2176,E4B" \
  --splits 8,16,32,64 --fused 8,16,32 2>&1 | tail -16
run() {  # run <label> <RUNS> [ENV=VALUE...]: one gemma4_bench.sh call under the given environment
  local label=$1 runs=$2; shift 2
  [ -z "$runs" ] && return
  echo "== $label ($*) $(date +%T), $((SECONDS - START)) s in"
  env "$@" NRUNS=1 T_RUN=${T_RUN:-40} RUNS="$runs" bash tools/gpu_experiments/gemma4_bench.sh 2>&1 \
    | grep -v "^kernels" | cut -c1-400
  mv "$OUT/gemma4_bench.tgz" "$OUT/gemma4_$label.tgz" 2>/dev/null
}
FUSED_PRE=(ANNA_Q_NORM_ROPE_ATTENTION=1 ANNA_QKV_NORM_ROPE_ATTENTION=1)
run A "${RUNS_A-E2B:1:2048:128:timeline}" ANNA_ATTENTION_FUSED_MERGE=0
run B "${RUNS_B-E2B:1:2048:128:timeline}" "${FUSED_PRE[@]}" ANNA_ATTENTION_FUSED_MERGE=0
run C "${RUNS_C-E2B:1:2048:128:timeline}" "${FUSED_PRE[@]}" ANNA_ATTENTION_FUSED_MERGE=1
run D "${RUNS_D-E4B:1:2048:128:timeline}" "${FUSED_PRE[@]}" ANNA_ATTENTION_FUSED_MERGE=0
run E "${RUNS_E-E4B:1:2048:128:timeline}" "${FUSED_PRE[@]}" ANNA_ATTENTION_FUSED_MERGE=1
echo "== done $(date +%T), $((SECONDS - START)) s"
