set -u
# Issue 23, Gemma 4 E2B / E4B batch-1 decode launches per layer, A/B'd one process per setting, each run with the
# served step's kernel timeline (`anna bench --timeline`): the opt-in fused q/k/v pre-processing kernels
# (ANNA_Q_NORM_ROPE_ATTENTION / ANNA_QKV_NORM_ROPE_ATTENTION), the split merge inside the decode attention launch
# (ANNA_ATTENTION_FUSED_MERGE) and the per-layer-input block in one launch (ANNA_POST_NORM_GATED_LINEAR). Through
# h200_run.sh, from the repository root:
#   MODE=script SCRIPT=tools/gpu_experiments/gemma_launch_check.sh bash anna-core/src/anna_core/bench/h200_run.sh
# Bounded: every part's timeout is cut to what is left of BUDGET (default 245 s). Parts (RUNS_* override a run's
# RUNS, "" skips it):
#   C. E2B, batch 1, 2048-token prompt, 128 new tokens, every switch on (6 kernels per layer);
#   B. the same with only the fused q/k/v pre-processing (8 kernels per layer: + the split merge, + a second
#      per-layer-input GEMV); A. nearly the code before this work (9 per layer: + q_norm_rope / qkv_norm_rope_cache;
#      per step the per-layer inputs as six launches and the LM head's soft cap as four torch launches:
#      `--disable-kernel per_layer_inputs:triton --disable-kernel linear_soft_cap:triton`; the media placeholder
#      gather, one launch per step in place of two, has no switch and stays on);
#   E / D. E4B as C / B;
#   then the kernel level: gated_block_bench.py (the per-layer-input block, one launch at several launch shapes vs
#   the two GEMVs) and attention_splits_sweep.py (attention + merge kernel per split count vs the fused merge at
#   8 / 16 / 32 splits).
# What to read: decode tok/s of C vs B vs A (and E vs D); in the timelines, `_merge_splits_kernel` and the second
# per-layer-input `_persistent_gemv_kernel` launches gone in C / E, and what `_paged_attention_kernel` and
# `_gated_block_kernel` cost instead; `_per_layer_inputs_kernel` (B-E, on by default) against A's six small kernels.
. tools/gpu_experiments/copy_bandwidth.sh
START=$SECONDS
left() { local l=$(( ${BUDGET:-245} - (SECONDS - START) )); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 1 ] && l=1; echo "$l"; }
run() {  # run <label> <RUNS> [ENV=VALUE...]: one gemma4_bench.sh call under the given environment
  local label=$1 runs=$2; shift 2
  [ -z "$runs" ] && return
  echo "== $label ($*) $(date +%T), $((SECONDS - START)) s in"
  env "$@" NRUNS=1 T_RUN="$(left "${T_RUN:-40}")" RUNS="$runs" bash tools/gpu_experiments/gemma4_bench.sh 2>&1 \
    | grep -v "^kernels" | cut -c1-400
  mv "$OUT/gemma4_bench.tgz" "$OUT/gemma4_$label.tgz" 2>/dev/null
}
PRE=(ANNA_Q_NORM_ROPE_ATTENTION=1 ANNA_QKV_NORM_ROPE_ATTENTION=1)
ALL=("${PRE[@]}" ANNA_ATTENTION_FUSED_MERGE=1 ANNA_POST_NORM_GATED_LINEAR=1)
run C "${RUNS_C-E2B:1:2048:128:timeline}" "${ALL[@]}"
run B "${RUNS_B-E2B:1:2048:128:timeline}" "${PRE[@]}"
run A "${RUNS_A-E2B:1:2048:128:timeline}" EXTRA_FLAGS="--disable-kernel per_layer_inputs:triton --disable-kernel linear_soft_cap:triton"
run E "${RUNS_E-E4B:1:2048:128:timeline}" "${ALL[@]}"
run D "${RUNS_D-E4B:1:2048:128:timeline}" "${PRE[@]}"
echo "== per-layer-input block $(date +%T), $((SECONDS - START)) s in"
timeout "$(left 25)" python3 tools/gpu_experiments/gated_block_bench.py 2>&1 | tail -4
echo "== attention split sweep $(date +%T), $((SECONDS - START)) s in"
timeout "$(left 40)" python3 tools/gpu_experiments/attention_splits_sweep.py --only "E2B sliding ctx640,E2B global ctx2176,E4B" \
  --splits 8,16,32,64 --fused 8,16,32 2>&1 | tail -12
# one file back for the five runs' JSON and logs (the device tool returns few files; h200_run.sh adds the cache parts)
(cd "$OUT" && tar cf gemma_launch_runs.tar gemma4_*.tgz 2>/dev/null && rm -f gemma4_*.tgz)
echo "== done $(date +%T), $((SECONDS - START)) s"
