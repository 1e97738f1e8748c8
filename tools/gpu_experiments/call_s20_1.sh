set -u
# Twentieth session, GPU call 1 (BENCHMARKS.md): issue 25's vision-language benchmark, then issue 26's ASR
# benchmark with HF at 1, 32 and 128 requests. Through h200_run.sh MODE=script.
echo "== vl $(date +%T)"
T_VL=${T_VL:-300} bash tools/gpu_experiments/vl_bench.sh
echo "== asr $(date +%T)"
T_ASR=${T_ASR:-200} bash tools/gpu_experiments/call_s19_4.sh
echo "== done $(date +%T)"
