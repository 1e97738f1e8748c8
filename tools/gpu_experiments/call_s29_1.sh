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
. tools/gpu_experiments/copy_bandwidth.sh
budget=${BUDGET:-520}
left() { echo $((budget - SECONDS)); }
tts() {  # tts ARM BOUND [env ...] -- [tts_bench flags]
  local arm=$1 bound=$2; shift 2
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  if [ "$(left)" -lt "$bound" ]; then echo "== TTS $arm skipped ($(left) s left, needs $bound)"; return; fi
  echo "== TTS $arm $(date +%T)"
  env "${envs[@]}" timeout "$bound" python3 -m anna_audio.tts_bench --shape Qwen3-TTS-12Hz-1.7B-Base --dtype bf16 \
    --frames 125 --concurrency 16 --out "$OUT/tts_$arm.json" "$@" > "$OUT/tts_$arm.log" 2>&1
  echo "exit $?"; grep -E "^(one request|[0-9]+ concurrent|device split|engine steps)" "$OUT/tts_$arm.log" | cut -c1-300
}
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
