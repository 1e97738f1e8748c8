set -u
# Twentieth session, GPU call 3 (BENCHMARKS.md): issue 30's TurboQuant bench (capacity under an 8 GiB KV budget and
# the batch-32 / 4k decode step, bf16 vs 4 / 3 bits) at the Qwen3.5-9B and Gemma 4 E4B shapes, after the wide-tile
# fix; then the kernel conformance suite on CUDA (xdist). Through h200_run.sh MODE=script.
mkdir -p "$OUT/tq"
echo "== turboquant $(date +%T)"
timeout "${T_BENCH:-330}" python3 tools/gpu_experiments/turboquant_bench.py --shapes "${SHAPES:-Qwen3.5-9B,gemma-4-E4B-it}" \
  --budget-gib 8 --context 4096 --batch 32 --steps 32 > "$OUT/tq/turboquant.jsonl" 2> "$OUT/tq/turboquant.log"
echo "turboquant_bench exit $? $(date +%T)"; cat "$OUT/tq/turboquant.jsonl"
grep -iE "error" "$OUT/tq/turboquant.log" | cut -c1-300 | sort | uniq -c | head -5
echo "== conformance $(date +%T)"
timeout "${T_CONF:-150}" python3 -m pytest -q -p no:cacheprovider -n 8 tools/gpu_experiments/test_kernel_conformance_cuda.py \
  > "$OUT/tq/conformance.log" 2>&1
echo "conformance exit $? $(date +%T)"; tail -5 "$OUT/tq/conformance.log" | cut -c1-300
