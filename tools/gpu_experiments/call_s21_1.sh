set -u
# Twenty-first session, GPU call 1 (BENCHMARKS.md): the copy bandwidth of this card; issue 27's speech benchmark at the
# Qwen3-TTS 1.7B shape after the speed branch, with the reference implementation in its own process (REF=1, .whl_tts
# carried); issue 30's TurboQuant bench (9B and E4B) with the head-dim-256 decode defaults. Through h200_run.sh.
. tools/gpu_experiments/copy_bandwidth.sh
echo "== tts $(date +%T)"
T_TTS=${T_TTS:-170} T_REF=${T_REF:-120} bash tools/gpu_experiments/tts_bench.sh
echo "== turboquant $(date +%T)"
mkdir -p "$OUT/tq"
timeout "${T_BENCH:-220}" python3 tools/gpu_experiments/turboquant_bench.py --shapes "${SHAPES:-Qwen3.5-9B,gemma-4-E4B-it}" \
  --budget-gib 8 --context 4096 --batch 32 --steps 32 > "$OUT/tq/turboquant.jsonl" 2> "$OUT/tq/turboquant.log"
echo "turboquant_bench exit $? $(date +%T)"; cat "$OUT/tq/turboquant.jsonl" | cut -c1-600
grep -iE "error" "$OUT/tq/turboquant.log" | cut -c1-300 | sort | uniq -c | head -5
echo "== done $(date +%T)"
