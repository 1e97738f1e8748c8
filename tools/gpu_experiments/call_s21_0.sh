set -u
# Twenty-first session, the first GPU call that came (BENCHMARKS.md), every part bounded: the card's copy bandwidth;
# issue 23's batch-1 targets at E2B / E4B with HF + fla in the same process; issue 27's speech benchmark at the
# Qwen3-TTS 1.7B shape after the speed branch (Anna, then the reference in its own process when .whl_tts is
# carried: same process); issue 30's TurboQuant bench at 9B with the head-dim-256 decode defaults. Through h200_run.sh.
. tools/gpu_experiments/copy_bandwidth.sh
echo "== gemma $(date +%T)"
NRUNS=1 T_RUN=${T_RUN:-100} RUNS="${RUNS_A:-E2B:1:2048:128:compare-hf:hf-output-len=16 E4B:1:2048:128:compare-hf:hf-output-len=16}" \
  bash tools/gpu_experiments/gemma4_bench.sh 2>&1 | grep -v "^kernels" | cut -c1-700
echo "== tts $(date +%T)"
T_TTS=${T_TTS:-230} bash tools/gpu_experiments/tts_bench.sh
echo "== turboquant $(date +%T)"
[ -n "${SKIP_TQ:-}" ] && { echo "skipped (SKIP_TQ)"; exit 0; }
mkdir -p "$OUT/tq"
timeout "${T_BENCH:-90}" python3 tools/gpu_experiments/turboquant_bench.py --shapes "${SHAPES:-Qwen3.5-9B}" \
  --budget-gib 8 --context 4096 --batch 32 --steps 32 > "$OUT/tq/turboquant.jsonl" 2> "$OUT/tq/turboquant.log"
echo "turboquant_bench exit $? $(date +%T)"; cut -c1-600 "$OUT/tq/turboquant.jsonl"
grep -iE "error" "$OUT/tq/turboquant.log" | cut -c1-300 | sort | uniq -c | head -5
echo "== done $(date +%T)"
