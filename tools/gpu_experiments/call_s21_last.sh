set -u
# Twenty-first session, the one short GPU call left (BENCHMARKS.md): copy bandwidth, issue 23's batch-1 decode at
# E2B / E4B (Anna only: HF side by side was measured in earlier sessions), then issue 27's speech benchmark (Anna only).
. tools/gpu_experiments/copy_bandwidth.sh
echo "== gemma $(date +%T)"
NRUNS=1 T_RUN=${T_RUN:-75} RUNS="${RUNS_A:-E2B:1:2048:128 E4B:1:2048:128}" \
  bash tools/gpu_experiments/gemma4_bench.sh 2>&1 | grep -v "^kernels" | cut -c1-600
echo "== tts $(date +%T)"
REF=0 T_TTS=${T_TTS:-120} bash tools/gpu_experiments/tts_bench.sh
echo "== done $(date +%T)"
