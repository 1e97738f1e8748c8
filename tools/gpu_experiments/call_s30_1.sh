set -u
# Next session's TTS GPU call (at most ~540 s; arms run while their bound is left of BUDGET, default 520 s): issue 27
# at 16 concurrent requests after the twenty-ninth session's changes, one arm after another:
#   defaults     the benchmark's client in a process of its own (the new default) -- the figure of record;
#   snake        ANNA_FUSED_SNAKE=1: the codec decoder's 29 SnakeBeta a chunk as one Triton launch each (seven torch
#                ops each before; about a quarter of the decoder's device time at 16 requests on an H100);
#   inproc       --in-process-client: the client in the server's process, as every figure before 2026-12-07;
#   conformance  the snake_beta kernel's CUDA conformance with the switch on;
#   profile      tts_time_profile.py with ANNA_FUSED_SNAKE=1 (the decoder's kernels by time, then each transposed
#                convolution as cuDNN's against a kernel-2 convolution + phase interleave, and each stride-1
#                convolution as served against a channels-last conv2d: what a decoder rewritten either way would save).
#   MODE=script SCRIPT=tools/gpu_experiments/call_s30_1.sh bash anna-core/src/anna_core/bench/h200_run.sh
. tools/gpu_experiments/tts_arms.sh  # budget, left, tts
tts defaults "${T_TTS:-220}" -- --runs "${TTS_RUNS:-2}"
tts snake "${T_TTS2:-110}" ANNA_FUSED_SNAKE=1 -- --runs 2
if [ "$(left)" -ge 90 ]; then
  echo "== tts_time_profile (fused snake) $(date +%T)"
  ANNA_FUSED_SNAKE=1 timeout 90 python3 tools/gpu_experiments/tts_time_profile.py > "$OUT/tts_profile.log" 2>&1
  echo "exit $?"; grep -vE "^USDT|[Ww]arn" "$OUT/tts_profile.log" | cut -c1-170 | tail -42
fi
if [ "$(left)" -ge 60 ]; then
  echo "== conformance snake_beta $(date +%T)"
  ANNA_FUSED_SNAKE=1 timeout 60 python3 -m pytest -q -p no:cacheprovider tools/gpu_experiments/test_kernel_conformance_cuda.py \
    -k snake 2>&1 | tail -3
fi
tts inproc "${T_TTS2:-110}" -- --runs 1 --in-process-client
echo "== done $(date +%T)"
