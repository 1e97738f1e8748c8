set -u
# Thirty-second session, second GPU call (never run; call_s32_3.sh replaced it; at most ~560 s): issue 27 at 16
# concurrent requests with the wide dilated convolutions computed over their phases (opt-in:
# ANNA_CODEC_PHASED_MIN_CHANNELS=256), against none phased (the default), then with the fused snake on top (ANNA_FUSED_SNAKE=1), then time-major (phased too) with
# the fused snake; one profile of the codec chunk with the default; then issue 29's 9B batch-1 ratios (bf16, int4 + int4 head, FP8 + FP8 head).
#   MODE=script SCRIPT=tools/gpu_experiments/call_s32_2.sh BUDGET=540 bash anna-core/src/anna_core/bench/h200_run.sh
. tools/gpu_experiments/tts_arms.sh  # copy bandwidth, budget, left, tts
echo "== profile phased $(date +%T)"
ANNA_CODEC_PHASED_MIN_CHANNELS=256 timeout 60 python3 tools/gpu_experiments/tts_time_profile.py --layout contiguous \
  > "$OUT/prof_phased.log" 2>&1
echo "exit $?"; grep -E "^(codec decoder|convolutions)|^ +[0-9.]+ us" "$OUT/prof_phased.log" | tail -25 | cut -c1-150
tts phased "${T_TTS:-75}" ANNA_CODEC_PHASED_MIN_CHANNELS=256 -- --runs 1
tts unphased "${T_TTS:-75}" -- --runs 1
tts phased_snake "${T_TTS:-75}" ANNA_CODEC_PHASED_MIN_CHANNELS=256 ANNA_FUSED_SNAKE=1 -- --runs 1
tts tm_phased_snake "${T_TTS:-75}" ANNA_CODEC_TIME_MAJOR=1 ANNA_CODEC_PHASED_MIN_CHANNELS=256 ANNA_FUSED_SNAKE=1 -- --runs 1
. tools/gpu_experiments/bench_9b.sh  # bench NAME BOUND [VAR=value ...] -- [anna bench flags]
bench bf16 "${T_RUN:-100}" --
bench int4 "${T_RUN:-100}" -- --weight-quant int4 --lm-head-quant int4
bench fp8 "${T_RUN:-100}" -- --weight-quant fp8 --lm-head-quant fp8
. tools/gpu_experiments/copy_bandwidth.sh | tee "$OUT/bandwidth_end.txt"  # (the first lines may fall out of the tail)
(cd "$OUT" && tar czf logs.tgz prof_*.log tts_*.log tts_*.json b1_*.log bandwidth_end.txt 2>/dev/null \
  && rm -f prof_*.log tts_*.log tts_*.json b1_*.log bandwidth_end.txt)
echo "== done $(date +%T)"
