set -u
# asr-fix branch (issue 26 review), one GPU call through h200_run.sh MODE=script (~4 minutes):
# 1. the features on CUDA vs transformers' extractor, and the segmented encoder's memory on a 1200 s clip;
# 2. the ASR benchmark at the 1.7B shape (features now computed on the GPU in the engine's steps, every concurrency
#    warmed up before its timed run), Anna only (HF's figures do not change with this branch).
echo "== asr device check $(date +%T)"
timeout ${T_CHECK:-90} python3 tools/gpu_experiments/asr_device_check.py > "$OUT/asr_check.log" 2>&1
echo "check exit $? $(date +%T)"; grep -v "^\s*$" "$OUT/asr_check.log" | tail -12 | cut -c1-600
echo "== asr bench $(date +%T)"
mkdir -p /tmp/asr17 && cp tests/qwen3_asr/reference_configs/Qwen3-ASR-1.7B.json /tmp/asr17/config.json
timeout ${T_ASR:-180} python3 -m anna_audio.bench --model-dir /tmp/asr17 --load-format dummy --dtype bf16 --clip-seconds 20 \
  --tokens-per-second 4 --concurrency 1,32,128 --json-out "$OUT/asr_report.json" > "$OUT/asr.log" 2>&1
echo "asr exit $? $(date +%T)"; grep -v "^\s*$" "$OUT/asr.log" | tail -6 | cut -c1-600
grep -E '"(prep_s|engine_s|wall_s|steps|encode_device_s|audio_s_per_s)"' "$OUT/asr_report.json" | tr -d ' ' | paste -sd' ' | cut -c1-1500
