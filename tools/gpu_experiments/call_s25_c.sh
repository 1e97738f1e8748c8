set -u
# Twenty-fifth session, third GPU call (about 330 s warm): Qwen3-TTS after the predictor's norm fusions
# (tts_cp_check.py: golden codes on the GPU, launches a frame; tts_qkattn_check.sh: RTF / 16 concurrent with the
# predictor's fused qk_norm_rope_cache_attention off and on), then
# Gemma 4 E4B with the fused q/k/v pre-processing + attention switches on (batch 1, 2048-token prompt; 289.0 tok/s
# with the defaults in the twenty-fourth session).
#   MODE=script SCRIPT=tools/gpu_experiments/call_s25_c.sh bash anna-core/src/anna_core/bench/h200_run.sh
. tools/gpu_experiments/copy_bandwidth.sh
echo "== TTS golden codes on the device, launches $(date +%T)"
timeout "${T_CHECK:-50}" python3 tools/gpu_experiments/tts_cp_check.py > "$OUT/tts_cp_check.log" 2>&1
echo "tts_cp_check exit $?"; grep -E "^(tts_cp_check|codes|launches)" "$OUT/tts_cp_check.log" | cut -c1-600
echo "== TTS fused predictor attention off / on $(date +%T)"
bash tools/gpu_experiments/tts_qkattn_check.sh
echo "== E4B fused pre-processing $(date +%T)"
ANNA_Q_NORM_ROPE_ATTENTION=1 ANNA_QKV_NORM_ROPE_ATTENTION=1 NRUNS=1 T_RUN=${T_P:-110} RUNS="E4B:1:2048:128:timeline" \
  bash tools/gpu_experiments/gemma4_bench.sh 2>&1 | grep -v "^kernels" | cut -c1-400
mv "$OUT/gemma4_bench.tgz" "$OUT/e4b_fused_P.tgz" 2>/dev/null
echo "== done $(date +%T)"
