#!/usr/bin/env bash
# Issue 27's speech benchmark at the Qwen3-TTS 1.7B shape with random weights, bf16, in one process
# (python -m anna_audio.tts_bench, see its docstring): anna serve's app on a loopback port, streamed
# POST /v1/audio/speech (pcm), FRAMES frames per request with EOS never chosen. Reports the first audio (first body
# byte) and the real-time factor of one request, and the per-request latency at CONC (default 16) concurrent ones
# against one, then whether decode graphs captured and the device split of a frame (lines "decode graphs" and
# "device split": a captured decode step, the code predictor alone, the vocoder per frame). Targets (H200): RTF <=
# 0.05, first audio <= 60 ms, 16 concurrent within 2x of one. Run from the repo
# root with the Anna wheels installed, e.g. through h200_run.sh:
#   MODE=script SCRIPT=tools/gpu_experiments/tts_bench.sh bash anna-core/src/anna_core/bench/h200_run.sh
# SHAPE (default Qwen3-TTS-12Hz-1.7B-Base) names a tests/audio/reference_configs file; FRAMES (default 125: 10 s of
# audio); CHUNKS ("first,rest" frames per decoded chunk, default the server's 1,8); TTS_FLAGS adds flags; T_TTS
# (default 180) bounds the benchmark's seconds. The report goes to $OUT/tts_bench.json, the log to
# $OUT/tts_bench.log; stdout gets the result lines. Any failure (a timeout included) prints the log's tail, exits
# non-zero. Then, when the reference's wheels are carried (.whl_tts/ at the repo root, tools/tts_fixtures/README.md;
# run(..., carry=[".whl_tts"])), the reference implementation at the same shape (tts_reference_bench.py, its own
# process, bounded by T_REF, default 110 s) -> $OUT/tts_reference.json; REF=0 skips it.
set -u -o pipefail
OUT=${OUT:-/tmp/anna_out}; mkdir -p "$OUT"
start=$SECONDS
chunks=${CHUNKS:+--chunk-frames $CHUNKS}
# shellcheck disable=SC2086
timeout "${T_TTS:-180}" python3 -m anna_audio.tts_bench --shape "${SHAPE:-Qwen3-TTS-12Hz-1.7B-Base}" --dtype bf16 \
  --frames "${FRAMES:-125}" --concurrency "${CONC:-16}" --out "$OUT/tts_bench.json" $chunks ${TTS_FLAGS:-} \
  > "$OUT/tts_bench.log" 2>&1
rc=$?
grep -E "^(tts_bench|one request|[0-9]+ concurrent|decode graphs|device split)" "$OUT/tts_bench.log"
echo "tts_bench exit $rc ($((SECONDS - start)) s)"
if [ "$rc" -ne 0 ]; then
  [ "$rc" -eq 124 ] && echo "tts_bench: TIMED OUT after ${T_TTS:-180} s"
  echo "tts_bench: FAILED; the log's tail:"; tail -40 "$OUT/tts_bench.log"; exit "$rc"
fi
if [ "${REF:-1}" != "0" ] && ls .whl_tts/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/tts_ref \
    .whl_tts/*.whl > "$OUT/tts_reference.log" 2>&1
  # shellcheck disable=SC2086
  PYTHONPATH="/tmp/tts_ref:${PYTHONPATH:-}" HF_HUB_OFFLINE=1 timeout "${T_REF:-110}" python3 \
    tools/gpu_experiments/tts_reference_bench.py --shape "${SHAPE:-Qwen3-TTS-12Hz-1.7B-Base}" --frames "${FRAMES:-125}" \
    --concurrency "${CONC:-16}" --out "$OUT/tts_reference.json" >> "$OUT/tts_reference.log" 2>&1
  ref=$?
  grep -E "^reference:" "$OUT/tts_reference.log" | cut -c1-1500
  [ "$ref" -ne 0 ] && { echo "tts_reference exit $ref; the log's tail:"; tail -25 "$OUT/tts_reference.log"; }
else
  echo "reference: skipped (REF=0 or no .whl_tts/ carried)"
fi
exit 0
