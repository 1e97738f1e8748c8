#!/usr/bin/env bash
# Issue 22: the served step's anatomy at the 2B shape under `anna serve`'s defaults. Through h200_run.sh:
#   MODE=script SCRIPT=tools/gpu_experiments/serve_diag.sh bash anna-core/src/anna_core/bench/h200_run.sh
# (.whl with litestar / uvicorn / py-spy, .annawhl and .tcache carried). HTTP: `anna serve` with no flags but
# the model, traced (serve_trace.py http), once per SWITCHES entry ("-": the interpreter's default GIL switch
# interval, else milliseconds); VARIANTS: the in-process engine settings to compare (serve_trace.py inproc).
set -u
M=tests/qwen35/reference_configs/${MODEL:-Qwen3.5-2B}
for sw in ${SWITCHES:--}; do
  [ "$sw" = "-" ] && unset SWITCH_MS || export SWITCH_MS=$sw
  PYSPY=${PYSPY-} timeout ${T_HTTP:-200} python3 tools/gpu_experiments/serve_trace.py http "$OUT" -- --load-format dummy \
    --model-dir "$M" --port 8011 --log-level info ${SERVE_FLAGS:-} > "$OUT/http_$sw.log" 2>&1
  echo "http (switch $sw) exit $?"; grep -E "^(single|c64|ttft512) |py-spy|runner set-up|ready in" "$OUT/http_$sw.log" | cut -c1-1500
  [ -f "$OUT/serve_trace_http.json" ] && mv "$OUT/serve_trace_http.json" "$OUT/serve_trace_http_$sw.json"
done
unset SWITCH_MS
[ -n "${VARIANTS-x}" ] || exit 0
timeout ${T_INPROC:-380} python3 tools/gpu_experiments/serve_trace.py inproc "$OUT" "$M" \
  ${VARIANTS:-base: r4:max_prefill_replays=4 r16:max_prefill_replays=16} > "$OUT/inproc.log" 2>&1
echo "inproc exit $?"; grep -E "^\[" "$OUT/inproc.log" | cut -c1-1500
for f in "$OUT"/pyspy_*.txt; do [ -f "$f" ] && gzip -f "$f"; done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u
