set -u
# Issue 30, branch tq-wide: TurboQuant at head dim 512 in two column chunks, three launches per attention call, the
# one-launch cache write. The decode-attention microbenchmark at the 9B and Gemma 4 E4B shapes (bf16 vs 4 / 3 bits,
# the cache write, n_regs / n_spills of every compiled kernel, the E4B-global sweep incl. the old one-chunk default),
# then, while the time lasts, the 9B and E4B decode steps (bf16 vs 4 / 3 bits). Logs in $OUT. About 190 s.
# Run: MODE=script SCRIPT=tools/gpu_experiments/call_tq_wide.sh bash anna-core/src/anna_core/bench/h200_run.sh
echo "== tq micro $(date +%T)"
timeout "${T_MICRO_TQ:-110}" python3 tools/gpu_experiments/tq_decode_micro.py --budget-s "${TQ_SWEEP_S:-70}" \
  > /dev/null 2> "$OUT/tq_micro_err.log"
echo "tq micro exit $? $(date +%T)"; cat "$OUT/tq_decode_micro.log" 2>/dev/null | cut -c1-240; tail -5 "$OUT/tq_micro_err.log" | cut -c1-300
echo "== tq bench $(date +%T)"
timeout "${T_BENCH:-80}" python3 tools/gpu_experiments/turboquant_bench.py --shapes "${SHAPES:-Qwen3.5-9B,gemma-4-E4B-it}" \
  --budget-gib 8 --context 4096 --batch 32 --steps 32 > "$OUT/tq.log" 2>&1
echo "turboquant_bench exit $? $(date +%T)"; grep '^{' "$OUT/tq.log"; grep -iE "error" "$OUT/tq.log" | cut -c1-300 | sort | uniq -c | head -5
