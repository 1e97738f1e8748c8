set -u
# Twenty-seventh session, third GPU call (about 150 s with the TTS kernels in the carried Triton cache): issue 27's
# figures with this session's defaults (the one-launch code draw, the GEMV on up to 16 rows), then the same with the
# norm prologue forced on at every row count (ANNA_GEMV_NORM_PROLOGUE=1: the 16-row predictor's 150 separate
# add_rms_norm launches a frame fused into its projections).
#   MODE=script SCRIPT=tools/gpu_experiments/call_s27_3.sh bash anna-core/src/anna_core/bench/h200_run.sh
. tools/gpu_experiments/copy_bandwidth.sh
for arm in defaults prologue; do
  env=(); [ "$arm" = prologue ] && env=(ANNA_GEMV_NORM_PROLOGUE=1)
  echo "== TTS $arm $(date +%T)"
  env "${env[@]}" timeout "${T_TTS:-100}" python3 -m anna_audio.tts_bench --shape Qwen3-TTS-12Hz-1.7B-Base --dtype bf16 \
    --frames 125 --concurrency 16 --runs 3 --out "$OUT/tts3_$arm.json" > "$OUT/tts3_$arm.log" 2>&1
  echo "exit $?"; grep -E "^(one request|[0-9]+ concurrent|device split)" "$OUT/tts3_$arm.log" | cut -c1-300
done
echo "== done $(date +%T)"
