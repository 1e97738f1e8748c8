#!/usr/bin/env bash
# Cold and warm start of `anna serve` (no flags but the model) on one fresh machine (issue 22): the first
# start from an empty ANNA_CACHE_DIR (compiles and autotunes every kernel), the second with the cache it
# left. Run it through h200_run.sh (MODE=script SCRIPT=tools/gpu_experiments/warm_start.sh NO_SAVE=1) with
# .whl (including litestar / uvicorn, see serve_bench.sh) and .annawhl carried, and NOT .tcache.
set -u
unset TRITON_CACHE_DIR
export ANNA_CACHE_DIR=/tmp/anna_cache_ws; rm -rf "$ANNA_CACHE_DIR"
P=8013; M=tests/qwen35/reference_configs/${MODEL:-Qwen3.5-9B}
for run in cold warm; do
  start=$SECONDS
  (timeout "${T_START:-300}" anna serve --load-format dummy --model-dir "$M" --port $P --log-level info \
    > "$OUT/start_$run.log" 2>&1 &)
  up=""
  for i in $(seq 1 "${T_START:-300}"); do
    python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$P/health', timeout=2)" 2>/dev/null && { up=1; break; }
    sleep 1
  done
  echo "$run: ${up:+ready after $((SECONDS - start)) s}${up:-not ready after $((SECONDS - start)) s}"
  grep -E "weights loaded|runner set-up|ready in|kernel cache|corrupt" "$OUT/start_$run.log"
  pkill -f "anna serve" ; sleep 3
done
du -sh "$ANNA_CACHE_DIR"; find "$ANNA_CACHE_DIR" -name '*.autotune.json' | wc -l
