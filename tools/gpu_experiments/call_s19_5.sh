set -u
# Nineteenth session, GPU call 5 (BENCHMARKS.md): the ASR benchmark, Anna alone at 1/32/128 requests, then Anna and HF at 1/32. Through h200_run.sh MODE=script.
mkdir -p /tmp/asr17 && cp tests/qwen3_asr/reference_configs/Qwen3-ASR-1.7B.json /tmp/asr17/config.json
timeout 75 python3 -m anna_audio.bench --model-dir /tmp/asr17 --load-format dummy --dtype bf16 --clip-seconds 20 \
  --tokens-per-second 4 --concurrency 1,32,128 --json-out "$OUT/asr_anna.json" > "$OUT/asr_anna.log" 2>&1
echo "anna exit $?"; grep -v "^\s*$" "$OUT/asr_anna.log" | grep -v '^[ {}"]' | tail -8 | cut -c1-300
timeout 55 python3 -m anna_audio.bench --model-dir /tmp/asr17 --load-format dummy --dtype bf16 --clip-seconds 20 \
  --tokens-per-second 4 --concurrency 1,32 --hf --json-out "$OUT/asr_hf.json" > "$OUT/asr_hf.log" 2>&1
echo "hf exit $?"; grep -v "^\s*$" "$OUT/asr_hf.log" | grep -v '^[ {}"]' | tail -8 | cut -c1-300
