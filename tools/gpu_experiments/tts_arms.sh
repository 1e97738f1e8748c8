# Sourced by the TTS GPU call scripts (call_s29_1.sh, call_s30_1.sh): the copy bandwidth, a time budget and one arm
# of the speech benchmark at the Qwen3-TTS 1.7B shape, 16 concurrent requests.
#   budget: BUDGET seconds (default 520) counted from the script's start; left: the seconds still left.
#   tts ARM BOUND [VAR=value ...] -- [tts_bench flags]: runs only when BOUND seconds are left; the log and report
#   under $OUT (tts_ARM.log / .json), the result lines printed.
. tools/gpu_experiments/copy_bandwidth.sh
budget=${BUDGET:-520}
left() { echo $((budget - SECONDS)); }
tts() {
  local arm=$1 bound=$2; shift 2
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  if [ "$(left)" -lt "$bound" ]; then echo "== TTS $arm skipped ($(left) s left, needs $bound)"; return; fi
  echo "== TTS $arm $(date +%T)"
  env "${envs[@]}" timeout "$bound" python3 -m anna_audio.tts_bench --shape Qwen3-TTS-12Hz-1.7B-Base --dtype bf16 \
    --frames 125 --concurrency 16 --out "$OUT/tts_$arm.json" "$@" > "$OUT/tts_$arm.log" 2>&1
  echo "exit $?"; grep -E "^(one request|[0-9]+ concurrent|device split|engine steps)" "$OUT/tts_$arm.log" | cut -c1-330
}
