#!/usr/bin/env bash
# Kernel timelines of `anna bench` (gemma4_bench.sh with RUNS) and then the served path (`anna serve` started
# as a user starts it, BARE=1, driven by `anna bench-serve`: serve_bench.sh) for each SERVE_MODELS entry (a
# directory under tests/qwen35/reference_configs or tests/gemma4/reference_configs). Run it through
# h200_run.sh (MODE=script SCRIPT=tools/gpu_experiments/serve_paths.sh) with .whl, .annawhl and .tcache carried;
# the served runs' logs and JSON come back in $OUT/serve_paths.tgz, one summary line per scenario on stdout.
set -u
[ -n "${RUNS:-}" ] && bash tools/gpu_experiments/gemma4_bench.sh
mkdir -p /tmp/serve_paths
for m in ${SERVE_MODELS:-Qwen3.5-35B-A3B}; do
  if [ -d "tests/qwen35/reference_configs/$m" ]; then rel=$m; else rel=../../gemma4/reference_configs/$m; fi
  start=$SECONDS; echo "== serve $m"
  OUT=/tmp/serve_paths/$m MODEL=$rel BARE=1 bash anna-core/src/anna_core/bench/serve_bench.sh
  echo "== serve $m done ($((SECONDS - start)) s)"
  tar czf "$OUT/serve_paths.tgz" -C /tmp serve_paths
done
