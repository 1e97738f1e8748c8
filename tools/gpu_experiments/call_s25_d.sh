set -u
# Twenty-fifth session, an H200-only call (about 300 s): issue 30 at the Gemma 4 31B shape (the bench's default Gemma
# shape; 62 GB of bf16 weights plus a batch-32 x 4k bf16 KV of ~32 GB do not fit an H100): capacity in an 8 GiB KV
# budget and the batch-32 x 4k decode step, bf16 / 4 / 3 bits, the default (`auto`) decode and write.
#   MODE=script SCRIPT=tools/gpu_experiments/call_s25_d.sh bash anna-core/src/anna_core/bench/h200_run.sh
. tools/gpu_experiments/copy_bandwidth.sh
echo "== 31B TurboQuant $(date +%T)"
timeout "${T_31B:-420}" python3 tools/gpu_experiments/turboquant_bench.py --shapes gemma-4-31B-it --budget-gib 8 \
  --context 4096 --batch 32 --steps 32 --bits "${BITS:-4,3}" > "$OUT/tq_31b.log" 2>&1
echo "turboquant_bench exit $? $(date +%T)"; grep '^{' "$OUT/tq_31b.log"; grep -v '^{' "$OUT/tq_31b.log" | tail -5 | cut -c1-300
echo "== done $(date +%T)"
