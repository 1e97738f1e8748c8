set -u
# Twenty-eighth session, first GPU call (about 500 s on a cold Triton cache): issue 29's int4 decode GEMV before and
# after the two-codes-per-shift decoding (wheels of the previous commit in .annawhl_base, this one's in .annawhl):
# the quantized-GEMV microbenchmark at the Qwen3.5-9B decode shapes (one row, int4), then `anna bench` at 9B
# batch 1: int4 weights and LM head (this build), bf16 (the ratio's denominator), int4 (the previous build).
# MICRO_ONLY=1 stops after the microbenchmarks.
#   MODE=script SCRIPT=tools/gpu_experiments/call_s28_1.sh bash anna-core/src/anna_core/bench/h200_run.sh
. tools/gpu_experiments/copy_bandwidth.sh
for v in base new; do
  w=.annawhl; [ "$v" = base ] && w=.annawhl_base
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "/tmp/site_$v" \
    .whl/*.whl "$w"/*.whl || exit 1
done
for v in base new; do
  echo "== wq_gemv_bench $v $(date +%T)"
  PYTHONPATH="/tmp/site_$v" TRITON_PRINT_AUTOTUNING=1 timeout "${T_MICRO:-150}" python3 tools/gpu_experiments/wq_gemv_bench.py \
    --model Qwen3.5-9B --rows "${WQ_ROWS:-1}" --schemes int4 > "$OUT/wq_$v.log" 2>&1
  echo "exit $?"; grep -vE "^(Triton autotuning|best config|  )" "$OUT/wq_$v.log" | cut -c1-220 | tail -30
done
bench() {  # bench NAME SITE [anna bench flags]: 9B batch 1, one run
  echo "== 9B b1 $1 $(date +%T)"
  PYTHONPATH="/tmp/site_$2" PATH="/tmp/site_$2/bin:$PATH" timeout "${T_RUN:-150}" anna bench \
    --model-dir tests/qwen35/reference_configs/Qwen3.5-9B --batch-size 1 --input-len 512 --output-len 128 --runs 1 \
    "${@:3}" --json > "$OUT/b1_$1.json" 2> "$OUT/b1_$1.log"
  echo "exit $?"; python3 tools/gpu_experiments/bench_summary.py "$OUT/b1_$1.json"
}
[ -n "${MICRO_ONLY:-}" ] && { echo "== done (MICRO_ONLY) $(date +%T)"; exit 0; }
bench int4_new new --weight-quant int4 --lm-head-quant int4
bench bf16 new
bench int4_base base --weight-quant int4 --lm-head-quant int4
echo "== done $(date +%T)"
