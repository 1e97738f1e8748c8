set -u
# Twenty-fifth session, second GPU call (about 420 s with a warm cache): issue 30's remaining levers at the 9B shape on
# an H200 (the step was 1.29x bf16 with words-chunked; target 1.25x) (issue 29's int4 timeline: call_s25_f.sh).
#   MODE=script SCRIPT=tools/gpu_experiments/call_s25_1.sh bash anna-core/src/anna_core/bench/h200_run.sh
# 1. the TurboQuant cache write alone, `chain` (41.8 us at 9B) against the new `columns` launch, and the GPU check
#    that both write the same bytes (test_kernel_conformance_cuda.py -k columns_write);
# 1b. the column-parallel query rotation / merge + rotation back (tq_basis.sh: old vs new launches);
# 2. the 9B batch-32 4k step: bf16, then 4 bits with words-chunked / words-chunked-capped x chain / columns writes;
. tools/gpu_experiments/copy_bandwidth.sh
echo "== write micro $(date +%T)"
timeout "${T_WRITE:-120}" python3 tools/gpu_experiments/tq_decode_micro.py --write-only --shapes 9B,E4B-global 2>&1 \
  | grep -v "^regs" | tail -12
timeout "${T_CHECK:-90}" python3 -m pytest -q -p no:cacheprovider tools/gpu_experiments/test_kernel_conformance_cuda.py \
  -k columns_write > "$OUT/tq_write_check.log" 2>&1
echo "columns write check exit $?"; tail -2 "$OUT/tq_write_check.log" | cut -c1-300
echo "== basis micro $(date +%T)"
OUT=$OUT T_TQ_BASIS=${T_TQ_BASIS:-100} bash tools/gpu_experiments/tq_basis.sh 2>&1 | tail -40 | cut -c1-300
echo "== 9B step $(date +%T)"
timeout "${T_STEP9:-170}" python3 tools/gpu_experiments/turboquant_bench.py --shapes Qwen3.5-9B --budget-gib 8 --context 4096 \
  --batch 32 --steps 32 --bits 4 --tq-decodes "${TQ_DECODES9:-words-chunked,words-chunked-capped}" \
  --tq-writes chain,columns --no-capacity > "$OUT/tq_step9.log" 2>&1
echo "turboquant_bench exit $? $(date +%T)"; grep '^{' "$OUT/tq_step9.log"
echo "== done $(date +%T)"
