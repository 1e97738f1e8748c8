set -u
# Act-order GPTQ with the column order read inside the quantized GEMVs (issue 29): the act-order and pre-quantized
# MoE checks plus the GEMV / norm-fused timings of plain, act-order fused and the former gather path
# (prequant_actorder_moe_check.py -> $OUT/prequant_actorder_moe.json), then the wq_linear /
# add_rms_norm_wq_linear conformance on CUDA (its examples include int4 weights with an int32 / int64 perm).
# Run from the repository root with the Anna wheels installed: OUT=... bash tools/gpu_experiments/actorder_fuse_check.sh
# (at most 290 s: 200 + 90).
echo "== act-order check and timings $(date +%T)"
timeout "${T_CHECK:-200}" python3 tools/gpu_experiments/prequant_actorder_moe_check.py 2>&1 | grep -v "^Writing" | tail -40
echo "== wq conformance on CUDA $(date +%T)"
timeout "${T_CONF:-90}" python3 -m pytest -q -p no:cacheprovider tools/gpu_experiments/test_kernel_conformance_cuda.py \
  -k "wq_linear" 2>&1 | tail -6
echo "== done $(date +%T)"
