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
bench() {  # bench NAME BOUND [env ...] -- [anna bench flags]
  local name=$1 bound=$2; shift 2
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  if [ "$(left)" -lt "$bound" ]; then echo "== 9B b1 $name skipped ($(left) s left, needs $bound)"; return; fi
  echo "== 9B b1 $name $(date +%T)"
  env "${envs[@]}" timeout "$bound" anna bench --model-dir tests/qwen35/reference_configs/Qwen3.5-9B --batch-size 1 \
    --input-len 512 --output-len 128 --runs 1 "$@" --json > "$OUT/b1_$name.json" 2> "$OUT/b1_$name.log"
  echo "exit $? $(date +%T)"; python3 tools/gpu_experiments/bench_summary.py "$OUT/b1_$name.json"
}
bench bf16 "${T_RUN:-110}" --
bench int4 "${T_RUN:-110}" -- --weight-quant int4 --lm-head-quant int4
bench fp8 "${T_RUN:-110}" -- --weight-quant fp8 --lm-head-quant fp8
if [ "$(left)" -ge "${T_STEP9:-200}" ]; then . tools/gpu_experiments/tq_step9.sh; else echo "== tq step skipped ($(left) s left)"; fi
bench int4_paired "${T_RUN:-110}" ANNA_WQ_INT4_PAIRED=1 -- --weight-quant int4 --lm-head-quant int4
(cd "$OUT" && tar czf logs.tgz b1_*.log tq_step9.log 2>/dev/null && rm -f b1_*.log tq_step9.log)
echo "== done $(date +%T)"
