set -u
# Issue 29 end to end (at most ~540 s; runs while their bound is left of BUDGET, default 520 s): `anna bench` at the
# Qwen3.5-9B shape, batch 1, 512-token prompt, 128 tokens, one run each: bf16 (the ratios' denominator), int4 weights
# + LM head and FP8 weights + LM head with the defaults (int4 one code per shift, FP8 codes converted in hardware on
# sm_89+) -- the target ratios --, then the A/B arms: int4 two codes per shift (ANNA_WQ_INT4_PAIRED=1) and FP8 with
# the shift-and-mask decode (ANNA_WQ_FP8_CVT=0). (Run on an H100 in the twenty-ninth session with the switches'
# earlier defaults; BENCHMARKS.md.)
#   MODE=script SCRIPT=tools/gpu_experiments/call_s29_3.sh bash anna-core/src/anna_core/bench/h200_run.sh
. tools/gpu_experiments/copy_bandwidth.sh
budget=${BUDGET:-520}
left() { echo $((budget - SECONDS)); }
. tools/gpu_experiments/bench_9b.sh  # bench NAME BOUND [VAR=value ...] -- [anna bench flags]
bench bf16 "${T_RUN:-120}" --
bench int4 "${T_RUN:-120}" -- --weight-quant int4 --lm-head-quant int4
bench fp8 "${T_RUN:-120}" -- --weight-quant fp8 --lm-head-quant fp8
bench int4_paired "${T_RUN:-120}" ANNA_WQ_INT4_PAIRED=1 -- --weight-quant int4 --lm-head-quant int4
bench fp8_bits "${T_RUN:-120}" ANNA_WQ_FP8_CVT=0 -- --weight-quant fp8 --lm-head-quant fp8
echo "== done $(date +%T)"
