set -u
# Twenty-third session: issue 29's figures in one run on one card — Qwen3.5-9B (random weights) batch 1 and batch 32
# decode in bf16, --weight-quant int4 (LM head int4) and --weight-quant fp8 (LM head fp8), `anna bench` through
# gemma4_bench.sh, each run bounded by T_RUN. About 520 s.
. tools/gpu_experiments/copy_bandwidth.sh
B1=Qwen3.5-9B:1:512:128
B32=Qwen3.5-9B:32:512:128
echo "== weight quant $(date +%T)"
NRUNS=1 T_RUN=${T_WQ:-80} RUNS="${RUNS_WQ:-$B1 $B1:weight-quant=int4:lm-head-quant=int4 $B1:weight-quant=fp8:lm-head-quant=fp8 $B32 $B32:weight-quant=fp8:lm-head-quant=fp8 $B32:weight-quant=int4:lm-head-quant=int4}" \
  bash tools/gpu_experiments/gemma4_bench.sh 2>&1 | grep -v "^kernels" | cut -c1-700
echo "== done $(date +%T)"
