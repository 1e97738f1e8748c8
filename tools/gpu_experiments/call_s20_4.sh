set -u
# Twentieth session, GPU call 4 (BENCHMARKS.md): issue 27's speech benchmark at the Qwen3-TTS 1.7B shape (Anna only,
# REF=0), then issue 26's ASR benchmark at 1 / 32 / 128 (features now on the device; Anna only). Through h200_run.sh.
echo "== tts $(date +%T)"
REF=${REF:-0} T_TTS=${T_TTS:-170} bash tools/gpu_experiments/tts_bench.sh
echo "== asr $(date +%T)"
mkdir -p /tmp/asr17 && cp tests/qwen3_asr/reference_configs/Qwen3-ASR-1.7B.json /tmp/asr17/config.json
timeout ${T_ASR:-90} python3 -m anna_audio.bench --model-dir /tmp/asr17 --load-format dummy --dtype bf16 --clip-seconds 20 \
  --tokens-per-second 4 --concurrency 1,32,128 --json-out "$OUT/asr_report.json" > "$OUT/asr.log" 2>&1
echo "asr exit $? $(date +%T)"; grep -E "^anna" "$OUT/asr.log" | cut -c1-300; tail -3 "$OUT/asr.log" | cut -c1-300
echo "== done $(date +%T)"
