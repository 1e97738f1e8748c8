set -u
# Twenty-fifth session, the one GPU call the session's device time allowed after refused starts (about 520 s warm):
# what landed without a GPU, checked first, most needed first (a cut-short call still returns the early parts). 1. the decode graphs' staging (every model) on Qwen3.5-9B batch 1 / 32
# (served = eager tokens; tok/s against 227.5 / 5,083, twenty-fourth session, H200); 2. Gemma 4 E2B batch 1 with the
# defaults (N: the fused greedy soft-cap head) and with the fused q/k/v pre-processing + attention switches (P);
# 3. Qwen3-TTS: golden codes through the frame loop on the device (tts_cp_check.py), then the fused
# qk_norm_rope_cache_attention: the golden codes through captured graphs off / on (tts_fused_golden_check.py), then
# its speed off / on for the talker and the code predictor (tts_qkattn_check.sh).
#   MODE=script SCRIPT=tools/gpu_experiments/call_s25_e.sh bash anna-core/src/anna_core/bench/h200_run.sh
. tools/gpu_experiments/copy_bandwidth.sh
echo "== 9B staging check $(date +%T)"
NRUNS=1 T_RUN=${T_9B:-45} RUNS="Qwen3.5-9B:1:512:128 Qwen3.5-9B:32:512:128" bash tools/gpu_experiments/gemma4_bench.sh 2>&1 \
  | grep -v "^kernels" | cut -c1-500
mv "$OUT/gemma4_bench.tgz" "$OUT/staging_9b.tgz" 2>/dev/null
echo "== TTS golden codes on the device, launches $(date +%T)"
timeout "${T_CHECK:-50}" python3 tools/gpu_experiments/tts_cp_check.py > "$OUT/tts_cp_check.log" 2>&1
echo "tts_cp_check exit $?"; grep -E "^(tts_cp_check|codes|launches)" "$OUT/tts_cp_check.log" | cut -c1-600
echo "== E2B N (defaults) $(date +%T)"
NRUNS=1 T_RUN=${T_E2B:-70} RUNS="E2B:1:2048:128:timeline" bash tools/gpu_experiments/gemma4_bench.sh 2>&1 \
  | grep -v "^kernels" | cut -c1-400
mv "$OUT/gemma4_bench.tgz" "$OUT/e2b_N.tgz" 2>/dev/null
echo "== E2B P (fused pre-processing) $(date +%T)"
ANNA_Q_NORM_ROPE_ATTENTION=1 ANNA_QKV_NORM_ROPE_ATTENTION=1 NRUNS=1 T_RUN=${T_P:-90} RUNS="E2B:1:2048:128:timeline" \
  bash tools/gpu_experiments/gemma4_bench.sh 2>&1 | grep -v "^kernels" | cut -c1-400
mv "$OUT/gemma4_bench.tgz" "$OUT/e2b_P.tgz" 2>/dev/null
echo "== TTS golden codes, fused attention off / on, captured graphs $(date +%T)"
timeout "${T_FG:-120}" python3 tools/gpu_experiments/tts_fused_golden_check.py > "$OUT/tts_fused_golden_check.log" 2>&1
echo "tts_fused_golden_check exit $?"; grep -E "op=|check|failed" "$OUT/tts_fused_golden_check.log" | cut -c1-300
echo "== TTS fused attention off / on $(date +%T)"
T_RUN=${T_TTS:-85} bash tools/gpu_experiments/tts_qkattn_check.sh
echo "== done $(date +%T)"
