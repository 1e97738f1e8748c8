set -u
# Issue 27 on a GPU (at most ~540 s; steps run while their bound is left of BUDGET, default 520 s): the codec
# decoder's time-major (channels-last) layout (ANNA_CODEC_TIME_MAJOR=1, opt-in) against [B, C, T]-contiguous (the
# default), then the fused snake on top:
#   prof_*       tts_time_profile.py (one frame of the code predictor and one 8-frame decoder chunk of 16 streams, by
#                kernel; the chunk's convolutions; the chunk's eager milliseconds) in each layout;
#   tts arms     the speech benchmark at 16 concurrent requests (tts_arms.sh) in each layout, and time-major with
#                ANNA_FUSED_SNAKE=1;
#   conformance  the snake_beta kernel's CUDA conformance with the switch on (what making it the default needs).
# Carry .whl, .annawhl, .tcache.
#   MODE=script SCRIPT=tools/gpu_experiments/call_s30_2.sh bash anna-core/src/anna_core/bench/h200_run.sh
. tools/gpu_experiments/tts_arms.sh  # budget, left, tts
prof() {  # prof NAME BOUND LAYOUT [VAR=value ...]
  local name=$1 bound=$2 layout=$3; shift 3
  if [ "$(left)" -lt "$bound" ]; then echo "== profile $name skipped ($(left) s left)"; return; fi
  echo "== profile $name $(date +%T)"
  env "$@" timeout "$bound" python3 tools/gpu_experiments/tts_time_profile.py --layout "$layout" > "$OUT/prof_$name.log" 2>&1
  echo "exit $?"; grep -E "^(code predictor|codec decoder|convolutions)|^ +[0-9.]+ us" "$OUT/prof_$name.log" | cut -c1-150 | head -34
}
prof contiguous "${T_PROF:-80}" contiguous
prof time_major "${T_PROF:-80}" time-major
tts time_major "${T_TTS:-200}" ANNA_CODEC_TIME_MAJOR=1 -- --runs 2
tts contiguous "${T_TTS:-200}" -- --runs 2
prof tm_snake "${T_PROF:-80}" time-major ANNA_FUSED_SNAKE=1
tts tm_snake "${T_TTS2:-110}" ANNA_CODEC_TIME_MAJOR=1 ANNA_FUSED_SNAKE=1 -- --runs 1
if [ "$(left)" -ge 60 ]; then
  echo "== conformance snake_beta $(date +%T)"
  ANNA_FUSED_SNAKE=1 timeout 60 python3 -m pytest -q -p no:cacheprovider tools/gpu_experiments/test_kernel_conformance_cuda.py \
    -k snake 2>&1 | tail -3
fi
(cd "$OUT" && tar czf logs.tgz prof_*.log tts_*.log tts_*.json 2>/dev/null && rm -f prof_*.log tts_*.log tts_*.json)
echo "== done $(date +%T)"
