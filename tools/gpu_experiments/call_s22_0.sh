set -u
# Twenty-second session, first GPU call (through h200_run.sh): the card's copy bandwidth; issue 23's batch-1 targets
# at E2B / E4B with HF + fla in the same process and a served-step kernel timeline; issue 27's speech: the overlap
# correctness check on CUDA (tts_overlap_check.py), then tts_bench at the 1.7B shape with overlap on and, when
# .whl_tts is carried, the reference in the same process. Each part bounded (T_RUN, T_TTS).
. tools/gpu_experiments/copy_bandwidth.sh
echo "== gemma $(date +%T)"
NRUNS=1 T_RUN=${T_RUN:-110} RUNS="${RUNS_A:-E2B:1:2048:128:compare-hf:hf-output-len=16:timeline E4B:1:2048:128:compare-hf:hf-output-len=16:timeline}" \
  bash tools/gpu_experiments/gemma4_bench.sh 2>&1 | grep -v "^kernels" | cut -c1-700
echo "== tts overlap check $(date +%T)"
timeout 100 python3 tools/gpu_experiments/tts_overlap_check.py 2>&1 | tail -15
echo "== tts $(date +%T)"
T_TTS=${T_TTS:-230} bash tools/gpu_experiments/tts_bench.sh
echo "== done $(date +%T)"
