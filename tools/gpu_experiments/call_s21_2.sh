set -u
# Twenty-first session, GPU call 2 (BENCHMARKS.md): issue 23's batch-1 targets at E2B / E4B with HF + fla in the same
# process, the opt-in fused q-norm / qkv-norm attention kernels A/B'd at batch 1, then batch 32. Through h200_run.sh.
. tools/gpu_experiments/copy_bandwidth.sh
echo "== gemma defaults $(date +%T)"
NRUNS=1 T_RUN=${T_RUN:-120} RUNS="${RUNS_A:-E2B:1:2048:128:compare-hf:hf-output-len=16 E4B:1:2048:128:compare-hf:hf-output-len=16}" \
  bash tools/gpu_experiments/gemma4_bench.sh 2>&1 | grep -v "^kernels" | cut -c1-700
mv "$OUT/gemma4_bench.tgz" "$OUT/gemma4_a.tgz" 2>/dev/null
echo "== gemma fused norm+attention (opt-in) $(date +%T)"
ANNA_Q_NORM_ROPE_ATTENTION=1 ANNA_QKV_NORM_ROPE_ATTENTION=1 NRUNS=1 T_RUN=${T_RUN:-120} \
  RUNS="${RUNS_B:-E2B:1:2048:128 E4B:1:2048:128}" bash tools/gpu_experiments/gemma4_bench.sh 2>&1 | grep -v "^kernels" | cut -c1-700
mv "$OUT/gemma4_bench.tgz" "$OUT/gemma4_b.tgz" 2>/dev/null
echo "== gemma batch 32 $(date +%T)"
NRUNS=1 T_RUN=${T_RUN:-120} RUNS="${RUNS_C:-E2B:32:512:128 E4B:32:512:128}" \
  bash tools/gpu_experiments/gemma4_bench.sh 2>&1 | grep -v "^kernels" | cut -c1-700
mv "$OUT/gemma4_bench.tgz" "$OUT/gemma4_c.tgz" 2>/dev/null
echo "== done $(date +%T)"
