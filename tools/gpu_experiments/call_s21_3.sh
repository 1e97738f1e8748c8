set -u
# Twenty-first session, GPU call 3 (BENCHMARKS.md): issue 29 end to end — anna bench at the Qwen3.5-9B shape, batch 1
# (512-token prompt, 128 new tokens): bf16, --weight-quant int4 with the LM head int4 too, --weight-quant fp8 (LM
# head bf16); the fused top-k head is on by default on GPUs (lm_head_path in each report). Then the fused top-k
# head's conformance on CUDA and its microbenchmark (topk_head_bench.sh). Through h200_run.sh.
. tools/gpu_experiments/copy_bandwidth.sh
B=Qwen3.5-9B:1:512:128
NRUNS=1 T_RUN=${T_RUN:-110} RUNS="${RUNS:-$B $B:weight-quant=int4:lm-head-quant=int4 $B:weight-quant=fp8}" \
  bash tools/gpu_experiments/gemma4_bench.sh 2>&1 | grep -v "^kernels" | cut -c1-700
echo "== topk head $(date +%T)"
T_CONF=${T_CONF:-70} T_HEAD=${T_HEAD:-70} bash tools/gpu_experiments/topk_head_bench.sh
echo "== done $(date +%T)"
