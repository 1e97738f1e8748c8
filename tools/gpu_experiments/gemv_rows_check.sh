#!/usr/bin/env bash
# The decode GEMV on 9-16 rows (the Triton GEMV and its fused prologues / epilogues instead of cuBLAS and separate
# norm / SiLU-mul launches): the default since the twenty-seventh session (measured faster on an H100, BENCHMARKS.md);
# this A/Bs it against the earlier 8-row limit. About 330 s warm (give the first runs more on a cold Triton cache).
# Run from the repo root with the Anna wheels installed, e.g.
#   MODE=script SCRIPT=tools/gpu_experiments/gemv_rows_check.sh bash anna-core/src/anna_core/bench/h200_run.sh
#  1. the linear microbenchmark at 9 and 16 rows (Triton vs cuBLAS per decode shape);
#  2. Qwen3-TTS 1.7B (issue 27: 16 concurrent within 2x of one; the code predictor runs 16 rows a pass there):
#     tts_bench with ANNA_GEMV_MAX_ROWS=8 (A: the earlier limit), the defaults (B: 16 rows), and B with the norm
#     prologue forced on for every row count (C: ANNA_GEMV_NORM_PROLOGUE=1); look at "16 concurrent ... (xN of one)"
#     and "device split at 16";
#  3. Qwen3.5-9B batch 16 decode, A then B.
set -u
export OUT=${OUT:-/tmp/anna_out}; mkdir -p "$OUT"
echo "== linear microbench, 9 / 16 rows $(date +%T)"
timeout "${T_MICRO:-120}" python3 -m anna_xpu_kernels.microbench --only linear --linear-rows 9,16 \
  > "$OUT/gemv_rows_micro.log" 2>&1
echo "exit $?"; grep -v "^\s*$" "$OUT/gemv_rows_micro.log" | tail -30 | cut -c1-200
for arm in A B C; do
  case $arm in A) env=(ANNA_GEMV_MAX_ROWS=8);; B) env=();; C) env=(ANNA_GEMV_NORM_PROLOGUE=1);; esac
  echo "== TTS $arm (${env[*]:-defaults}) $(date +%T)"
  env "${env[@]}" timeout "${T_TTS:-110}" python3 -m anna_audio.tts_bench --shape Qwen3-TTS-12Hz-1.7B-Base --dtype bf16 \
    --frames 125 --concurrency 16 --runs 2 --out "$OUT/gemv_rows_tts_$arm.json" > "$OUT/gemv_rows_tts_$arm.log" 2>&1
  echo "exit $?"; grep -E "^(one request|[0-9]+ concurrent|device split)" "$OUT/gemv_rows_tts_$arm.log" | cut -c1-300
done
for arm in A B; do
  env=(); [ "$arm" = A ] && env=(ANNA_GEMV_MAX_ROWS=8)
  echo "== 9B batch 16 $arm $(date +%T)"
  env "${env[@]}" NRUNS=1 T_RUN="${T_9B:-90}" RUNS="Qwen3.5-9B:16:512:128" bash tools/gpu_experiments/gemma4_bench.sh \
    2>&1 | grep -v "^kernels" | cut -c1-400
  mv "$OUT/gemma4_bench.tgz" "$OUT/gemv_rows_9b_$arm.tgz" 2>/dev/null
done
echo "== done $(date +%T)"
