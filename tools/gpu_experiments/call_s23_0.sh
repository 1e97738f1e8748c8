set -u
# Twenty-third session, first GPU call (through h200_run.sh), the H200-only item first: the card's copy bandwidth;
# issue 23's Gemma 4 E2B / E4B batch-1 decode with HF + fla in the same process and a served-step kernel timeline;
# then issue 27's CUDA correctness checks: the sampler noise edge (tts_codes_check.py), the speech overlap
# (tts_overlap_check.py) and the talker's prefill graphs (tts_prefill_check.py). Each part bounded; under ~480 s.
. tools/gpu_experiments/copy_bandwidth.sh
echo "== gemma $(date +%T)"
NRUNS=1 T_RUN=${T_RUN:-120} RUNS="${RUNS_A:-E2B:1:2048:128:compare-hf:hf-output-len=16:timeline E4B:1:2048:128:compare-hf:hf-output-len=16:timeline}" \
  bash tools/gpu_experiments/gemma4_bench.sh 2>&1 | grep -v "^kernels" | cut -c1-700
echo "== tts codes check $(date +%T)"
timeout 70 python3 tools/gpu_experiments/tts_codes_check.py 2>&1 | tail -8
echo "== tts overlap check $(date +%T)"
timeout 80 python3 tools/gpu_experiments/tts_overlap_check.py 2>&1 | tail -12
echo "== tts prefill check $(date +%T)"
timeout 60 python3 tools/gpu_experiments/tts_prefill_check.py 2>&1 | grep -E "^(base|custom_voice|voice_design|tts_prefill_check|Traceback|[A-Za-z]*Error)" | cut -c1-400
echo "== done $(date +%T)"
