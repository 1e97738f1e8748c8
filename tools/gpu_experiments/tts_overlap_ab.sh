#!/usr/bin/env bash
# Issue 27: the speech decode steps overlapped (asynchronous scheduling: each decode step launched before the previous
# one is read back, the code predictor's codes travelling with the sampled ids) against the same engine waiting for
# every step (--no-async-scheduling), at the Qwen3-TTS 1.7B shape, random weights, bf16, in one call on one machine:
# python -m anna_audio.tts_bench twice (no reference), FRAMES frames (default 125) per request, CONC (default 16)
# concurrent. Run from the repo root with the Anna wheels installed, e.g.
#   MODE=script SCRIPT=tools/gpu_experiments/tts_overlap_ab.sh bash anna-core/src/anna_core/bench/h200_run.sh
# Each run is bounded by T_RUN seconds (default 130; both < 300 s). Look for, per run, "one request: first audio ...
# RTF ..." and "16 concurrent: ... (xN of one)", and "engine steps: ... (M launched ahead)": M near the decode graph
# steps with overlap on, 0 with it off. Reports go to $OUT/tts_overlap_{on,off}.json, logs to $OUT/tts_overlap_*.log.
set -u -o pipefail
OUT=${OUT:-/tmp/anna_out}; mkdir -p "$OUT"
start=$SECONDS
status=0
for mode in on off; do
  flags=""; [ "$mode" = off ] && flags="--no-async-scheduling"
  # shellcheck disable=SC2086
  timeout "${T_RUN:-130}" python3 -m anna_audio.tts_bench --shape "${SHAPE:-Qwen3-TTS-12Hz-1.7B-Base}" --dtype bf16 \
    --frames "${FRAMES:-125}" --concurrency "${CONC:-16}" --runs 2 --out "$OUT/tts_overlap_$mode.json" $flags \
    > "$OUT/tts_overlap_$mode.log" 2>&1
  rc=$?
  echo "== overlap $mode (exit $rc, $((SECONDS - start)) s so far)"
  grep -E "^(tts_bench|one request|[0-9]+ concurrent|engine steps|decode graphs|device split)" \
    "$OUT/tts_overlap_$mode.log" | cut -c1-600
  if [ "$rc" -ne 0 ]; then
    [ "$rc" -eq 124 ] && echo "overlap $mode: TIMED OUT after ${T_RUN:-130} s"
    echo "overlap $mode: FAILED; the log's tail:"; tail -30 "$OUT/tts_overlap_$mode.log"; status=$rc
  fi
done
exit "$status"
