#!/usr/bin/env bash
# Issue 27, the code predictor's launches (tts-cp-fuse branch: norms fused into the qkv / gate-up / head projections,
# a frame's Gumbel noise in one draw; 35.1 op-table / aten calls a predictor step greedy, 40.5 sampled, from 46.1 /
# 56.1, counted on the CPU). Two parts, each bounded, under 200 s in all:
#  1. tools/gpu_experiments/tts_cp_check.py (T_CHECK, default 50 s): the golden tiny checkpoints' codes through the
#     frame loop on the device ("codes <kind>: N/N frames equal"), then at the 1.7B shape (random bf16 weights) the
#     device ops a frame launches at batch 1 and 16, greedy and sampled, with the frame's graph-replay time
#     ("launches ...": the new count a step, against ~46 / ~56 op-table calls before, more on the device where an op
#     is several kernels) and "tts_cp_check: ok".
#  2. REF=0 tools/gpu_experiments/tts_bench.sh (T_TTS, default 140 s; the 1.7B shape, bf16, 125 frames, 16
#     concurrent): "one request: ... RTF" (target <= 0.05; 0.0506 before on an H200), "16 concurrent" (target within
#     2x of one; 2.25x before), and "device split at 1 / 16 request(s)": the code predictor's ms per frame (2.43 / 4.18
#     before on an H200, of a decode step of 3.61 / 5.94).
# Run from the repo root with the Anna wheels installed, e.g. through h200_run.sh:
#   MODE=script SCRIPT=tools/gpu_experiments/tts_cp_check.sh bash anna-core/src/anna_core/bench/h200_run.sh
# Logs: $OUT/tts_cp_check.log, $OUT/tts_bench.{log,json}. Exits non-zero when a part fails.
set -u -o pipefail
OUT=${OUT:-/tmp/anna_out}; mkdir -p "$OUT"
start=$SECONDS
status=0
echo "== tts_cp_check $(date +%T)"
timeout "${T_CHECK:-50}" python3 tools/gpu_experiments/tts_cp_check.py > "$OUT/tts_cp_check.log" 2>&1
rc=$?
grep -E "^(tts_cp_check|codes|launches)" "$OUT/tts_cp_check.log" | cut -c1-600
if [ "$rc" -ne 0 ]; then
  [ "$rc" -eq 124 ] && echo "tts_cp_check: TIMED OUT"
  echo "tts_cp_check exit $rc; the log's tail:"; tail -20 "$OUT/tts_cp_check.log"; status=$rc
fi
echo "== tts_bench (REF=0) $(date +%T), $((SECONDS - start)) s in"
REF=0 T_TTS=${T_TTS:-140} bash tools/gpu_experiments/tts_bench.sh
rc=$?
[ "$rc" -ne 0 ] && status=$rc
echo "tts_cp_check.sh done in $((SECONDS - start)) s, exit $status"
exit "$status"
