#!/usr/bin/env bash
# The module split (branch split-modules, behaviour unchanged) on the GPU, run from the repository root with the
# Anna wheels installed (or PYTHONPATH set): the card and its copy bandwidth; the kernel conformance suite on CUDA
# for the norm ops (their Triton kernels moved to anna_xpu_kernels.norms / post_norms / norm_tiles) and the fused
# top-k head (its test helpers moved to anna_core.kernels.examples.linear / sample_gen); the Triton kernels' sm_90
# compile and PDL-order check. Everything should pass as on main. Logs land in $OUT; at most 280 s (60 + 120 + 100).
set -u
. tools/gpu_experiments/copy_bandwidth.sh
echo "== conformance $(date +%T)"
timeout "${T_CONF:-120}" python3 -m pytest -q -p no:cacheprovider tools/gpu_experiments/test_kernel_conformance_cuda.py \
  -k "norm or lm_head_topk" > "$OUT/split_conformance.log" 2>&1
echo "conformance exit $?"; tail -5 "$OUT/split_conformance.log"
echo "== compile check $(date +%T)"
env -u TRITON_INTERPRET -u ANNA_TRITON_INTERPRET timeout "${T_COMPILE:-100}" python3 -m anna_xpu_kernels.compile_check \
  --arch 90 > "$OUT/split_compile.log" 2>&1
echo "compile_check exit $? ($(grep -c ': ok,' "$OUT/split_compile.log") kernels ok; 93 expected)"
echo "== done $(date +%T)"
