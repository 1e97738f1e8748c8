set -u
# Twenty-fifth session, a GPU call for later (about 220 s warm): 1. Gemma 4 E4B batch 1 with the fused q/k/v
# pre-processing + attention switches (289.0 tok/s with the defaults, twenty-fourth session, H200; target 335);
# 2. Qwen3.5-9B int4 (head int4) batch 1 with the served step's kernel timeline (1.59x bf16 on the H200, target 1.8x:
# where the step's time goes besides the quantized GEMVs).
#   MODE=script SCRIPT=tools/gpu_experiments/call_s25_f.sh bash anna-core/src/anna_core/bench/h200_run.sh
. tools/gpu_experiments/copy_bandwidth.sh
echo "== E4B fused pre-processing $(date +%T)"
ANNA_Q_NORM_ROPE_ATTENTION=1 ANNA_QKV_NORM_ROPE_ATTENTION=1 NRUNS=1 T_RUN=${T_P:-110} RUNS="E4B:1:2048:128:timeline" \
  bash tools/gpu_experiments/gemma4_bench.sh 2>&1 | grep -v "^kernels" | cut -c1-400
mv "$OUT/gemma4_bench.tgz" "$OUT/e4b_fused_P.tgz" 2>/dev/null
echo "== int4 timeline $(date +%T)"
NRUNS=1 T_RUN=${T_INT4:-70} RUNS="Qwen3.5-9B:1:512:128:weight-quant=int4:lm-head-quant=int4:timeline" \
  bash tools/gpu_experiments/gemma4_bench.sh 2>&1 | grep -v "^kernels" | cut -c1-400 | head -30
echo "== done $(date +%T)"
