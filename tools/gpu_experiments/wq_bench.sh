#!/usr/bin/env bash
# Issue 29 (weights quantized at load on the GPU): run from the repository root with the Anna wheels of the commit
# under test installed (e.g. through h200_run.sh, MODE=script SCRIPT=tools/gpu_experiments/wq_bench.sh, with .whl,
# .annawhl and .tcache carried). Every part has its own time-out and logs to $OUT as it goes ($OUT/wq_*.log).
# PARTS picks the parts (default "check micro"; one GPU call each is the safe split, the anna bench parts compile
# and autotune cold on a fresh machine):
#   check   the wq_linear / add_rms_norm_wq_linear Triton kernels against their float32 references on the GPU (the
#           kernel conformance suite, compiled; the FP8 path is only exercised on a device here)       <= 120 s
#   micro   tools/gpu_experiments/wq_gemv_bench.py at Qwen3.5-9B's decode shapes, one row: bf16 / int4 / int8 / fp8
#           us, effective GB/s, which kernel, error; one step's GEMV sums (LM head bf16 and quantized)   <= 280 s
#           (cold, most of it compiling the autotuner's ~12 variants per scheme; printed line by line)
#   micro8  the same at 8 rows                                                                         <= 280 s
#   b1a b1b b1c   anna bench, Qwen3.5-9B batch 1 (512 in, 128 out, one run): b1a bf16 and int4, b1b int8 and fp8
#           (LM head bf16 in both), b1c int4 and fp8 with the LM head quantized too (--lm-head-quant); b32a bf16 and
#           int4, b32b fp8 at batch 32. Two runs per part, each <= T_RUN (default 280 s: a cold start compiles and
#           autotunes the quantized GEMV per row bucket), so a part fits one 600 s call.
# Expected: micro's step speed-up (LM head bf16) int4 >= x1.8 and fp8 >= x1.6 at M=1 if the kernel streams near
# copy bandwidth; the per-shape GB/s column says how far each is from it.
set -u
OUT=${OUT:-/tmp/wq_out}; mkdir -p "$OUT"
PARTS=${PARTS:-"check micro"}
for part in $PARTS; do
  case $part in
    check)
      timeout "${T_CHECK:-120}" python3 -m pytest -q -p no:cacheprovider tools/gpu_experiments/test_kernel_conformance_cuda.py \
        -k wq 2>&1 | tee "$OUT/wq_check.log" | tail -5 ;;
    micro|micro8)
      rows=${MICRO_ROWS:-$([ "$part" = micro ] && echo 1 || echo 8)}
      timeout "${T_MICRO:-280}" python3 tools/gpu_experiments/wq_gemv_bench.py --model Qwen3.5-9B --rows "$rows" \
        2>&1 | tee "$OUT/wq_$part.log" | grep -v "^\s*$" | tail -40
      echo "$part exit ${PIPESTATUS[0]}" ;;
    b1a|b1b|b1c|b32a|b32b)
      B=Qwen3.5-9B:1:512:128; C=Qwen3.5-9B:32:512:128
      case $part in
        b1a) runs="$B $B:weight-quant=int4" ;;
        b1b) runs="$B:weight-quant=int8 $B:weight-quant=fp8" ;;
        b1c) runs="$B:weight-quant=int4:lm-head-quant=int4 $B:weight-quant=fp8:lm-head-quant=fp8" ;;
        b32a) runs="$C $C:weight-quant=int4" ;;
        b32b) runs="$C:weight-quant=fp8" ;;
      esac
      mkdir -p "$OUT/$part"; RUNS=${RUNS:-$runs} NRUNS=${NRUNS:-1} T_RUN=${T_RUN:-280} OUT="$OUT/$part" \
        bash tools/gpu_experiments/gemma4_bench.sh 2>&1 | tee "$OUT/wq_$part.log" | grep -E "^== |decode_tokens|Traceback|Error" ;;
    *) echo "unknown part $part" ;;
  esac
done
