#!/usr/bin/env bash
# Issue 27's speech benchmark at the Qwen3-TTS 1.7B shape with random weights, bf16, in one process
# (python -m anna_audio.tts_bench, see its docstring): anna serve's app on a loopback port, streamed
# POST /v1/audio/speech (pcm), FRAMES frames per request with EOS never chosen. Reports the first audio (first body
# byte) and the real-time factor of one request, and the per-request latency at CONC (default 16) concurrent ones
# against one, then whether decode graphs and the vocoder's graphs captured and the device split of a frame (lines
# "decode graphs", "vocoder graphs" and "device split": a captured decode step, the code predictor alone, the vocoder
# per frame as served, replaying its graphs, and eager). Targets (H200): RTF <=
# 0.05, first audio <= 60 ms, 16 concurrent within 2x of one. Run from the repo
# root with the Anna wheels installed, e.g. through h200_run.sh:
#   MODE=script SCRIPT=tools/gpu_experiments/tts_bench.sh bash anna-core/src/anna_core/bench/h200_run.sh
# SHAPE (default Qwen3-TTS-12Hz-1.7B-Base) names a tests/audio/reference_configs file; FRAMES (default 125: 10 s of
# audio); CHUNKS ("first,rest" frames per decoded chunk, default the server's 1,8); TTS_FLAGS adds flags. The report
# goes to $OUT/tts_bench.json, the log to $OUT/tts_bench.log; stdout gets the result lines. Any failure (a timeout
# included) prints the log's tail, exits non-zero.
# REF=1 (the default) when the reference's wheels are carried (.whl_tts/ at the repo root, tools/tts_fixtures/README.md;
# run(..., carry=[".whl_tts"])): they are installed under /tmp/tts_ref and the same process, after Anna's measurement
# and with Anna's engine released, runs the reference implementation (qwen_tts, random weights of the same shape) at
# the same frames and concurrency (tts_bench --reference): the report gains "reference" and "side_by_side", stdout
# the lines "reference" and "side by side ...". REF=0, or no wheels carried, measures Anna alone. T_TTS bounds the
# seconds (default 180 alone, 280 with the reference).
set -u -o pipefail
OUT=${OUT:-/tmp/anna_out}; mkdir -p "$OUT"
start=$SECONDS
chunks=${CHUNKS:+--chunk-frames $CHUNKS}
reference=""
limit=${T_TTS:-180}
if [ "${REF:-1}" != "0" ] && ls .whl_tts/*.whl >/dev/null 2>&1; then
  if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/tts_ref \
      .whl_tts/*.whl > "$OUT/tts_reference_install.log" 2>&1; then
    export PYTHONPATH="/tmp/tts_ref:${PYTHONPATH:-}" HF_HUB_OFFLINE=1
    reference="--reference"
    limit=${T_TTS:-280}
  else
    echo "reference: its wheels did not install; the log's tail:"; tail -10 "$OUT/tts_reference_install.log"
  fi
else
  echo "reference: skipped (REF=0 or no .whl_tts/ carried)"
fi
# shellcheck disable=SC2086
timeout "$limit" python3 -m anna_audio.tts_bench --shape "${SHAPE:-Qwen3-TTS-12Hz-1.7B-Base}" --dtype bf16 \
  --frames "${FRAMES:-125}" --concurrency "${CONC:-16}" --out "$OUT/tts_bench.json" $chunks $reference \
  ${TTS_FLAGS:-} > "$OUT/tts_bench.log" 2>&1
rc=$?
grep -E "^(tts_bench|one request|[0-9]+ concurrent|engine steps|decode graphs|vocoder graphs|device split|reference|side by side)" \
  "$OUT/tts_bench.log" | cut -c1-1500
echo "tts_bench exit $rc ($((SECONDS - start)) s)"
if [ "$rc" -ne 0 ]; then
  [ "$rc" -eq 124 ] && echo "tts_bench: TIMED OUT after $limit s"
  echo "tts_bench: FAILED; the log's tail:"; tail -40 "$OUT/tts_bench.log"; exit "$rc"
fi
exit 0
