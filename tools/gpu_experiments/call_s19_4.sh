set -u
# Nineteenth session, GPU call 4 (BENCHMARKS.md): the ASR benchmark with HF at 1, 32 and 128 requests. Through h200_run.sh MODE=script.
echo "== asr $(date +%T)"
mkdir -p /tmp/asr17 && cp tests/qwen3_asr/reference_configs/Qwen3-ASR-1.7B.json /tmp/asr17/config.json
timeout ${T_ASR:-190} python3 -m anna_audio.bench --model-dir /tmp/asr17 --load-format dummy --dtype bf16 --clip-seconds 20 \
  --tokens-per-second 4 --concurrency 1,32,128 --hf --json-out "$OUT/asr_report.json" > "$OUT/asr.log" 2>&1
echo "asr exit $? $(date +%T)"; grep -v "^\s*$" "$OUT/asr.log" | tail -30 | cut -c1-600
