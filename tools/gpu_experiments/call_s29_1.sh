set -u
# Twenty-ninth session, TTS GPU call (about 400 s on a cold Triton cache): issue 27 with the current defaults, then
# with --max-prefill-replays 1 (call_s28_3.sh: the A/B of the concurrent prompts' prefills; the concurrent round's
# first-audio minimum and maximum say whether the arrivals spread it), then where a frame's device time goes at 16
# requests by kernel (tts_time_profile.py: the code predictor's frame and the codec decoder's 8-frame chunk).
#   MODE=script SCRIPT=tools/gpu_experiments/call_s29_1.sh bash anna-core/src/anna_core/bench/h200_run.sh
bash tools/gpu_experiments/call_s28_3.sh
echo "== tts_time_profile $(date +%T)"
timeout "${T_PROF:-120}" python3 tools/gpu_experiments/tts_time_profile.py > "$OUT/tts_profile.log" 2>&1
echo "exit $?"; grep -v "^USDT\|Warning\|warn" "$OUT/tts_profile.log" | cut -c1-170 | tail -40
echo "== done $(date +%T)"
