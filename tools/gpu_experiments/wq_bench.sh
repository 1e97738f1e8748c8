#!/usr/bin/env bash
# Issue 29 (weights quantized at load on the GPU): run through h200_run.sh (MODE=script
# SCRIPT=tools/gpu_experiments/wq_bench.sh) with .whl, .annawhl (wheels of the commit under test) and .tcache carried.
#   1. CHECK (default 1): the wq_linear / add_rms_norm_wq_linear Triton kernels against their float32 references on
#      the GPU (the kernel conformance suite, compiled; the FP8 hardware conversion is only exercised here)
#   2. MICRO (default 1): tools/gpu_experiments/wq_gemv_bench.py at Qwen3.5-9B's decode shapes, MICRO_ROWS (default 1)
#   3. RUNS (default: bf16 / int4 / fp8 / fp8 with the LM head in fp8 / int8 at batch 1): anna bench through
#      tools/gpu_experiments/gemma4_bench.sh, one summary line each (its tgz holds each run's JSON and log)
set -u
if [ "${CHECK:-1}" = "1" ]; then
  timeout 300 python3 -m pytest -q -p no:cacheprovider tools/gpu_experiments/test_kernel_conformance_cuda.py -k wq 2>&1 | tail -5
fi
if [ "${MICRO:-1}" = "1" ]; then
  timeout 300 python3 tools/gpu_experiments/wq_gemv_bench.py --model Qwen3.5-9B --rows "${MICRO_ROWS:-1}" 2>&1 | tail -30
fi
B=Qwen3.5-9B:1:512:128
export RUNS=${RUNS:-"$B $B:weight-quant=int4 $B:weight-quant=fp8 $B:weight-quant=fp8:lm-head-quant=fp8 $B:weight-quant=int8"}
export NRUNS=${NRUNS:-1}
bash tools/gpu_experiments/gemma4_bench.sh
