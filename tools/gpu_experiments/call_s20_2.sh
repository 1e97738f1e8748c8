set -u
# Twentieth session, GPU call 2 (BENCHMARKS.md): issue 25's VL benchmark again (the ITL clock fixed, the text TTFT
# at the image prompt's length added), then issue 30's TurboQuant conformance and the 9B decode-step / capacity
# bench (bf16 vs 4 / 3 bits). Through h200_run.sh MODE=script.
echo "== vl $(date +%T)"
T_VL=${T_VL:-200} bash tools/gpu_experiments/vl_bench.sh
echo "== turboquant $(date +%T)"
mkdir -p "$OUT/tq"
LOGS=$OUT/tq T_CONF=${T_CONF:-100} T_BENCH=${T_BENCH:-250} SHAPES=${SHAPES:-Qwen3.5-9B} \
  bash tools/gpu_experiments/turboquant_bench.sh
rm -f "$OUT/turboquant.tgz"  # the logs are in $OUT/tq already
echo "== done $(date +%T)"
