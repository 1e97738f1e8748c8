set -u
# Next session's TTS GPU call (at most ~540 s; arms run while their bound is left of BUDGET, default 520 s): issue 27
# at 16 concurrent requests after the twenty-ninth session's changes, one arm after another:
#   defaults     the benchmark's client in a process of its own (the new default) -- the figure of record;
#   snake        ANNA_FUSED_SNAKE=1: the codec decoder's 29 SnakeBeta a chunk as one Triton launch each (seven torch
#                ops each before; about a quarter of the decoder's device time at 16 requests on an H100);
#   inproc       --in-process-client: the client in the server's process, as every figure before 2026-12-07;
#   conformance  the snake_beta kernel's CUDA conformance with the switch on;
#   profile      tts_time_profile.py with ANNA_FUSED_SNAKE=1 (the decoder's kernels by time).
#   MODE=script SCRIPT=tools/gpu_experiments/call_s30_1.sh bash anna-core/src/anna_core/bench/h200_run.sh
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
  echo "exit $?"; grep -E "^(one request|[0-9]+ concurrent|device split|engine steps)" "$OUT/tts_$arm.log" | cut -c1-330
}
tts defaults "${T_TTS:-220}" ANNA_X=0 -- --runs "${TTS_RUNS:-2}"
tts snake "${T_TTS2:-110}" ANNA_FUSED_SNAKE=1 -- --runs 2
tts inproc "${T_TTS2:-110}" ANNA_X=0 -- --runs 1 --in-process-client
if [ "$(left)" -ge 60 ]; then
  echo "== conformance snake_beta $(date +%T)"
  ANNA_FUSED_SNAKE=1 timeout 60 python3 -m pytest -q -p no:cacheprovider tools/gpu_experiments/test_kernel_conformance_cuda.py \
    -k snake 2>&1 | tail -3
fi
if [ "$(left)" -ge 60 ]; then
  echo "== tts_time_profile (fused snake) $(date +%T)"
  ANNA_FUSED_SNAKE=1 timeout 60 python3 tools/gpu_experiments/tts_time_profile.py > "$OUT/tts_profile.log" 2>&1
  echo "exit $?"; grep -vE "^USDT|[Ww]arn" "$OUT/tts_profile.log" | cut -c1-170 | tail -18
fi
echo "== done $(date +%T)"
