#!/usr/bin/env bash
# Issue 27's speech benchmark at the Qwen3-TTS 1.7B shape with random weights, bf16, in one process
# (python -m anna_audio.tts_bench, see its docstring): anna serve's app on a loopback port, streamed
# POST /v1/audio/speech (pcm), FRAMES frames per request with EOS never chosen. Reports the first audio (first body
# byte) and the real-time factor of one request, and the per-request latency at CONC (default 16) concurrent ones
# against one. Targets (H200): RTF <= 0.05, first audio <= 60 ms, 16 concurrent within 2x of one. Run from the repo
# root with the Anna wheels installed, e.g. through h200_run.sh:
#   MODE=script SCRIPT=tools/gpu_experiments/tts_bench.sh bash anna-core/src/anna_core/bench/h200_run.sh
# SHAPE (default Qwen3-TTS-12Hz-1.7B-Base) names a tests/audio/reference_configs file; FRAMES (default 125: 10 s of
# audio); CHUNKS ("first,rest" frames per decoded chunk, default the server's 2,8); TTS_FLAGS adds flags; T_TTS
# (default 240) bounds the benchmark's seconds. The report goes to $OUT/tts_bench.json, the log to
# $OUT/tts_bench.log; stdout gets the result lines. Any failure (a timeout included) prints the log's tail, exits
# non-zero.
set -u -o pipefail
OUT=${OUT:-/tmp/anna_out}; mkdir -p "$OUT"
start=$SECONDS
chunks=${CHUNKS:+--chunk-frames $CHUNKS}
# shellcheck disable=SC2086
timeout "${T_TTS:-240}" python3 -m anna_audio.tts_bench --shape "${SHAPE:-Qwen3-TTS-12Hz-1.7B-Base}" --dtype bf16 \
  --frames "${FRAMES:-125}" --concurrency "${CONC:-16}" --out "$OUT/tts_bench.json" $chunks ${TTS_FLAGS:-} \
  > "$OUT/tts_bench.log" 2>&1
rc=$?
grep -E "^(tts_bench|one request|[0-9]+ concurrent)" "$OUT/tts_bench.log"
echo "tts_bench exit $rc ($((SECONDS - start)) s)"
if [ "$rc" -ne 0 ]; then
  [ "$rc" -eq 124 ] && echo "tts_bench: TIMED OUT after ${T_TTS:-240} s"
  echo "tts_bench: FAILED; the log's tail:"; tail -40 "$OUT/tts_bench.log"; exit "$rc"
fi
