set -u
# Twenty-seventh session, second GPU call (about 420 s warm): ANNA_GEMV_MAX_ROWS=16 at Qwen3.5-9B batch 16 (A: the
# default 8 rows, B: 16; make 16 the default only if B is no slower here and faster for TTS at 16 requests:
# call_s27_1.sh), then issue 30's 9B batch-32 4k step (bf16, 4 bits with the `chain` and `columns` cache writes;
# 1.29x bf16 on the H200 with `chain`, target 1.25x).
#   MODE=script SCRIPT=tools/gpu_experiments/call_s27_2.sh bash anna-core/src/anna_core/bench/h200_run.sh
. tools/gpu_experiments/copy_bandwidth.sh
for arm in A B; do
  env=(); [ "$arm" = B ] && env=(ANNA_GEMV_MAX_ROWS=16)
  echo "== 9B batch 16 $arm (${env[*]:-defaults}) $(date +%T)"
  env "${env[@]}" NRUNS=1 T_RUN="${T_9B:-100}" RUNS="Qwen3.5-9B:16:512:128" bash tools/gpu_experiments/gemma4_bench.sh \
    2>&1 | grep -v "^kernels" | cut -c1-400
  mv "$OUT/gemma4_bench.tgz" "$OUT/rows_9b_$arm.tgz" 2>/dev/null
done
. tools/gpu_experiments/tq_step9.sh
echo "== done $(date +%T)"
