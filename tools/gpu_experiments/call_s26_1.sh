set -u
# Twenty-sixth session, a GPU call for the next session (about 330 s warm; give each run 150 s on a cold Triton cache:
# the fused kernels' autotuning compiled for minutes there): issue 23's fused pre-processing switches one at a time at
# Gemma 4 E4B batch 1, where both together measured 5% slower (252.5 -> 239.9 tok/s, H100) while E2B gained 3.5%:
# N (defaults, timeline), Q (ANNA_Q_NORM_ROPE_ATTENTION=1: KV-shared layers), K (ANNA_QKV_NORM_ROPE_ATTENTION=1:
# own-K/V layers), S (both =256: the sliding layers' 256-dim heads only), P (both, timeline); then issue 29's int4
# step timeline (1.59x bf16 on the H200, target 1.8x). Compare each arm's tok/s with N's in the same call.
#   MODE=script SCRIPT=tools/gpu_experiments/call_s26_1.sh bash anna-core/src/anna_core/bench/h200_run.sh
. tools/gpu_experiments/copy_bandwidth.sh
arm() {  # arm NAME ENV... : one E4B run with the given switches
  local name=$1; shift
  echo "== E4B $name ($*) $(date +%T)"
  env "$@" NRUNS=1 T_RUN=${T_ARM:-150} RUNS="E4B:1:2048:128${TL:+:timeline}" bash tools/gpu_experiments/gemma4_bench.sh \
    2>&1 | grep -v "^kernels" | cut -c1-400
  mv "$OUT/gemma4_bench.tgz" "$OUT/e4b_$name.tgz" 2>/dev/null
}
TL=1 arm N ANNA_Q_NORM_ROPE_ATTENTION=0
arm Q ANNA_Q_NORM_ROPE_ATTENTION=1
arm K ANNA_QKV_NORM_ROPE_ATTENTION=1
arm S ANNA_Q_NORM_ROPE_ATTENTION=256 ANNA_QKV_NORM_ROPE_ATTENTION=256
TL=1 arm P ANNA_Q_NORM_ROPE_ATTENTION=1 ANNA_QKV_NORM_ROPE_ATTENTION=1
echo "== int4 timeline $(date +%T)"
NRUNS=1 T_RUN=${T_INT4:-90} RUNS="Qwen3.5-9B:1:512:128:weight-quant=int4:lm-head-quant=int4:timeline" \
  bash tools/gpu_experiments/gemma4_bench.sh 2>&1 | grep -v "^kernels" | cut -c1-400 | head -30
echo "== done $(date +%T)"
