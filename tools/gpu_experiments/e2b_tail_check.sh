set -u
# Issue 23, Gemma 4 E2B batch-1 decode: the step's work outside the layers (e2b-tail branch). Two `anna bench` runs
# (E2B, batch 1, 2048-token prompt, 128 new tokens, --timeline) through gemma4_bench.sh, one process each:
#   N. defaults: the greedy step's ids from `linear_soft_cap_argmax` (the LM head GEMV, per-block soft-capped max /
#      argmax partials, their reduction: no float32 logits, no torch argmax), the staged input ids gathered from the
#      staging buffer (no in-graph copy), one host -> device staging copy per step (was three: the head and one per
#      attention group's block tables);
#   O. the same with `--disable-kernel linear_soft_cap_argmax:triton`: the LM head as before (`linear_soft_cap`, then
#      torch's argmax over the float32 logits).
# From the repository root, with the Anna wheels installed (or through h200_run.sh):
#   MODE=script SCRIPT=tools/gpu_experiments/e2b_tail_check.sh bash anna-core/src/anna_core/bench/h200_run.sh
# Bounded: each run's timeout is cut to what is left of BUDGET (default 145 s; T_RUN caps one run, default 70 s).
# What to read: decode tok/s of N vs O (and vs 536.0, the twenty-fourth session's defaults on an H200); in N's
# timeline `_soft_cap_argmax_partials_kernel` + `_argmax_of_blocks_kernel` in place of O's `_soft_cap_kernel` +
# `reduce_kernel<...ReduceOp<float...>` (11.5 µs exposed in the twenty-fourth session); one `memcpy32_post` per step
# in both (was two: the staged ids' copy is gone, the ids' copy into the output buffer stays); the step's first
# kernel's exposed time (the gap between steps: the ids' read-back and the staging upload, most of the two memcpys'
# 28 µs before) smaller; served_vs_eager_match_tokens 16 of 16 in both (the eager path takes torch's argmax of the
# full logits: the fused argmax must give its tokens).
START=$SECONDS
left() { local l=$(( ${BUDGET:-145} - (SECONDS - START) )); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 1 ] && l=1; echo "$l"; }
run() {  # run <label> [ENV=VALUE...]: one gemma4_bench.sh call under the given environment
  local label=$1; shift
  echo "== $label ($*) $(date +%T), $((SECONDS - START)) s in"
  env "$@" NRUNS=1 T_RUN="$(left "${T_RUN:-70}")" RUNS="${RUNS-E2B:1:2048:128:timeline}" \
    bash tools/gpu_experiments/gemma4_bench.sh 2>&1 | grep -v "^kernels" | cut -c1-400
  mv "$OUT/gemma4_bench.tgz" "$OUT/e2b_tail_$label.tgz" 2>/dev/null
}
run N
run O EXTRA_FLAGS="--disable-kernel linear_soft_cap_argmax:triton"
echo "== done in $((SECONDS - START)) s"
