set -u
# Twenty-eighth session, TTS GPU call (about 330 s; the TTS kernels compile cold on a fresh machine): issue 27 with
# the current defaults (the one-launch code draw, the GEMV on up to 16 rows), then the same with
# --max-prefill-replays 1 (16 arriving prompts share one eager prefill instead of replaying 16 prefill graphs one by
# one; a prompt alone still replays its graph): the A/B of the concurrent requests' prefills (first audio at 16 was
# ~150 ms against ~20 ms alone).
#   MODE=script SCRIPT=tools/gpu_experiments/call_s28_3.sh bash anna-core/src/anna_core/bench/h200_run.sh
. tools/gpu_experiments/copy_bandwidth.sh
for arm in defaults replays1; do
  flags=(); [ "$arm" = replays1 ] && flags=(--max-prefill-replays 1)
  echo "== TTS $arm $(date +%T)"
  timeout "$([ "$arm" = defaults ] && echo "${T_TTS:-230}" || echo "${T_TTS2:-120}")" python3 -m anna_audio.tts_bench \
    --shape Qwen3-TTS-12Hz-1.7B-Base --dtype bf16 --frames 125 --concurrency 16 --runs "${TTS_RUNS:-3}" "${flags[@]}" \
    --out "$OUT/tts_$arm.json" > "$OUT/tts_$arm.log" 2>&1
  echo "exit $?"; grep -E "^(one request|[0-9]+ concurrent|device split|engine steps)" "$OUT/tts_$arm.log" | cut -c1-300
done
echo "== done $(date +%T)"
