set -u
# Twenty-eighth session, third GPU call (about 200 s warm): issue 30's 9B batch-32 4k decode step on the card at hand,
# bf16 and 4 bits with the `chain` and the `columns` cache writes (columns measured faster on an H100 in the
# twenty-seventh session; `auto` still takes chain). Issue 27's figures: call_s27_3.sh (defaults, then the norm
# prologue forced on), run before this one on the same machine.
#   MODE=script SCRIPT=tools/gpu_experiments/call_s28_2.sh bash anna-core/src/anna_core/bench/h200_run.sh
. tools/gpu_experiments/copy_bandwidth.sh
echo "== 9B TurboQuant step $(date +%T)"
timeout "${T_STEP9:-200}" python3 tools/gpu_experiments/turboquant_bench.py --shapes Qwen3.5-9B --budget-gib 8 \
  --context 4096 --batch 32 --steps 32 --bits 4 --tq-decodes "${TQ_DECODES9:-words-chunked}" \
  --tq-writes chain,columns --no-capacity > "$OUT/tq_step9.log" 2>&1
echo "turboquant_bench exit $? $(date +%T)"; grep '^{' "$OUT/tq_step9.log"; grep -v '^{' "$OUT/tq_step9.log" | tail -3 | cut -c1-300
echo "== done $(date +%T)"
