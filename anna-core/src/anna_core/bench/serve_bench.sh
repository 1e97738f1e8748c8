#!/usr/bin/env bash
# Issue 4 serving benchmark on the GPU machine: anna serve (dummy 2B weights) + anna bench-serve.
# BARE=1 starts the server with no flags but the model; MODEL (default Qwen3.5-2B) picks the config.
# SERVE_FLAGS adds serve flags, e.g. SERVE_FLAGS='--disable-prefix-caching --scheduler-max-prefill-tokens 8192'.
# The device image has no litestar / uvicorn: put them and their dependencies into .whl first
#   pip download --python-version 3.12 --only-binary=:all: --platform manylinux2014_x86_64 --platform any \
#     -d .whl uvicorn litestar prometheus-client
# Needs .whl (third-party wheels), .annawhl (Anna wheels: pip wheel --no-deps ./anna-core ./anna-cli ./anna-qwen35 ./anna-xpu-kernels) and .tcache (saved Triton cache).
OUT=${OUT:-/tmp/anna_out}; mkdir -p "$OUT"
set -u; export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc; mkdir -p /tmp/tc
cat .tcache/tc.tgz.* | tar xz -C /tmp/tc 2>/dev/null
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl .annawhl/*.whl || exit 1
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
CFG=tests/qwen35/reference_configs; P=8011
# BARE=1: the server as a user starts it, with no flags but the model (the issue-22 targets; info log: start-up breakdown)
if [ -n "${BARE:-}" ]; then ARGS="--log-level info"; else ARGS="--scheduler-max-batch-size 64 --max-model-len 4096 --disable-prompt-cache --log-level warning"; fi
(timeout ${T_SERVE:-600} anna serve --load-format dummy --model-dir $CFG/${MODEL:-Qwen3.5-2B} --port $P $ARGS ${SERVE_FLAGS:-} > $OUT/serve.log 2>&1 &)
# WAIT (default 420 s): a cold Triton cache makes a MoE model's engine build (autotuning, graph capture) take minutes
for i in $(seq 1 "${WAIT:-420}"); do python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$P/health', timeout=2)" 2>/dev/null && break; sleep 1; done; echo "up after ~$i s"
B="anna bench-serve --base-url http://127.0.0.1:$P --prompt-token-ids --vocab-size 150000 --json"
for s in "1 8 128 128 single" "64 192 128 128 c64" "16 64 512 32 ttft512"; do set -- $s
timeout 60 $B --concurrency $1 --num-requests $2 --input-len $3 --output-len $4 --output $OUT/serve_$5.json > /dev/null 2>> $OUT/serve.log; done
python3 - $OUT <<'PY'
import json,sys,pathlib
for f in sorted(pathlib.Path(sys.argv[1]).glob("serve_*.json")):
    r=json.loads(f.read_text()); q=r["requests"]
    print(f.name, q, "out_tok/s=%.1f"%r["output_tokens_per_s"], "ttft", {k:round(v,1) for k,v in r["ttft_ms"].items() if isinstance(v,(int,float))}, "itl", {k:round(v,2) for k,v in r["itl_ms"].items() if isinstance(v,(int,float))}, r.get("errors"))
PY
grep -E "weights loaded|runner set-up|ready in|max_model_len" $OUT/serve.log; tail -3 $OUT/serve.log; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u
pkill -f "anna serve .*--port $P" 2>/dev/null; sleep 2  # free the port (and the GPU) for a next server
