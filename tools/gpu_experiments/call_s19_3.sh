set -u
# Nineteenth session, GPU call 3 (BENCHMARKS.md): the ASR benchmark at the Qwen3-ASR-1.7B shape and the VL benchmark at 9B. Through h200_run.sh MODE=script.
echo "== asr $(date +%T)"
mkdir -p /tmp/asr17 && cp tests/qwen3_asr/reference_configs/Qwen3-ASR-1.7B.json /tmp/asr17/config.json
timeout ${T_ASR:-230} python3 -m anna_audio.bench --model-dir /tmp/asr17 --load-format dummy --dtype bf16 --clip-seconds 20 \
  --tokens-per-second 4 --concurrency 1,32,128 --hf --json-out "$OUT/asr_report.json" > "$OUT/asr.log" 2>&1
echo "asr exit $? $(date +%T)"; grep -v "^\s*$" "$OUT/asr.log" | tail -25 | cut -c1-400
echo "== vl $(date +%T)"
T_VL=${T_VL:-230} VL_FLAGS="--runs 2" bash tools/gpu_experiments/vl_bench.sh 2>&1 | cut -c1-600
echo "== end $(date +%T)"
