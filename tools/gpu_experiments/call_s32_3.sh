set -u
# Thirty-second session, issue 27 (at most ~BUDGET s): the phased dilated convolutions (opt-in,
# ANNA_CODEC_PHASED_MIN_CHANNELS) and the fused snake (opt-in, ANNA_FUSED_SNAKE=1), what making them defaults needs:
# the speech benchmark at 16 concurrent requests: defaults, phased at 256 channels + fused snake, phased alone, then
# codec_phased_micro.py (each dilated convolution dilated vs phased; the chunk at each threshold, eager and graphs,
# with its differences) and the fused snake alone, as time allows; the copy bandwidth into the logs at the end.
#   MODE=script SCRIPT=tools/gpu_experiments/call_s32_3.sh BUDGET=330 bash anna-core/src/anna_core/bench/h200_run.sh
. tools/gpu_experiments/tts_arms.sh  # copy bandwidth, budget, left, tts
tts defaults "${T_TTS:-60}" -- --runs 1
tts phased256_snake "${T_TTS:-60}" ANNA_CODEC_PHASED_MIN_CHANNELS=256 ANNA_FUSED_SNAKE=1 -- --runs 1
tts phased256 "${T_TTS:-60}" ANNA_CODEC_PHASED_MIN_CHANNELS=256 -- --runs 1
if [ "$(left)" -ge "${T_MICRO:-130}" ]; then
  echo "== codec_phased_micro $(date +%T)"
  timeout "${T_MICRO:-130}" python3 tools/gpu_experiments/codec_phased_micro.py > "$OUT/phased_micro.log" 2>&1
  echo "exit $?"; grep -v Warning "$OUT/phased_micro.log" | cut -c1-260 | tail -22
else echo "== codec_phased_micro skipped ($(left) s left)"; fi
tts snake "${T_TTS:-60}" ANNA_FUSED_SNAKE=1 -- --runs 1
. tools/gpu_experiments/copy_bandwidth.sh | tee "$OUT/bandwidth_end.txt"
(cd "$OUT" && tar czf logs.tgz phased_micro.log tts_*.log tts_*.json bandwidth_end.txt 2>/dev/null \
  && rm -f phased_micro.log tts_*.log tts_*.json bandwidth_end.txt)
echo "== done $(date +%T)"
