set -u
# Twenty-ninth session, TTS GPU call (at most ~540 s; the TTS kernels compile cold on a fresh machine): issue 27 at
# 16 concurrent requests, arms one after another while time is left (BUDGET seconds, default 520, counted from the
# start; an arm starts only with its bound left):
#   defaults    the current defaults (T_TTS, default 240 s; TTS_RUNS single runs, default 2);
#   replays1    --max-prefill-replays 1: the 16 arriving prompts share one eager prefill instead of replaying 16
#               prefill graphs one by one (the first audio at 16 was ~150 ms against ~20 ms alone); the concurrent
#               round's first-audio minimum and maximum say whether the arrivals spread it (T_TTS2, default 110 s);
#   prologue    ANNA_GEMV_NORM_PROLOGUE=1: the 16-row code predictor's separate add_rms_norm launches (~150 a
#               frame) fused into its projections (T_TTS2);
#   profile     where a frame's device time goes at 16 requests, by kernel (tts_time_profile.py, T_PROF, 60 s).
#   MODE=script SCRIPT=tools/gpu_experiments/call_s29_1.sh bash anna-core/src/anna_core/bench/h200_run.sh
. tools/gpu_experiments/tts_arms.sh  # budget, left, tts
tts defaults "${T_TTS:-240}" -- --runs "${TTS_RUNS:-2}"
tts replays1 "${T_TTS2:-110}" -- --runs 1 --max-prefill-replays 1
tts prologue "${T_TTS2:-110}" ANNA_GEMV_NORM_PROLOGUE=1 -- --runs 1
if [ "$(left)" -ge "${T_PROF:-60}" ]; then
  echo "== tts_time_profile $(date +%T)"
  timeout "${T_PROF:-60}" python3 tools/gpu_experiments/tts_time_profile.py > "$OUT/tts_profile.log" 2>&1
  echo "exit $?"; grep -vE "^USDT|[Ww]arn" "$OUT/tts_profile.log" | cut -c1-170 | tail -30
else
  echo "== tts_time_profile skipped ($(left) s left)"
fi
echo "== done $(date +%T)"
