set -u
# Thirty-second session, first GPU call (at most ~560 s): issue 29's end-to-end ratios on an H200 with the
# defaults of the twenty-ninth session (int4 one code per shift; FP8 converted in hardware on sm_89+), never yet
# measured on an H200 -- `anna bench` 9B batch 1, 512-token prompt, 128 tokens: bf16, int4 + int4 LM head, FP8 +
# FP8 LM head --, then issue 30's 9B batch-32 4k decode step (bf16, 4 bits with the chain and columns writes), then int4 with
# two codes per shift (ANNA_WQ_INT4_PAIRED=1) if time is left.
#   MODE=script SCRIPT=tools/gpu_experiments/call_s32_1.sh BUDGET=540 bash anna-core/src/anna_core/bench/h200_run.sh
. tools/gpu_experiments/copy_bandwidth.sh
budget=${BUDGET:-540}
left() { echo $((budget - SECONDS)); }
. tools/gpu_experiments/bench_9b.sh  # bench NAME BOUND [VAR=value ...] -- [anna bench flags]
bench bf16 "${T_RUN:-110}" --
bench int4 "${T_RUN:-110}" -- --weight-quant int4 --lm-head-quant int4
bench fp8 "${T_RUN:-110}" -- --weight-quant fp8 --lm-head-quant fp8
if [ "$(left)" -ge "${T_STEP9:-200}" ]; then . tools/gpu_experiments/tq_step9.sh; else echo "== tq step skipped ($(left) s left)"; fi
bench int4_paired "${T_RUN:-110}" ANNA_WQ_INT4_PAIRED=1 -- --weight-quant int4 --lm-head-quant int4
(cd "$OUT" && tar czf logs.tgz b1_*.log tq_step9.log 2>/dev/null && rm -f b1_*.log tq_step9.log)
echo "== done $(date +%T)"
