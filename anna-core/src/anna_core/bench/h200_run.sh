#!/usr/bin/env bash
# The GPU benchmark session recorded in BENCHMARKS.md (run from the repository root on the GPU machine,
# with the wheels of anna-core / anna-qwen35 / anna-xpu-kernels / anna-cli in .annawhl, the third-party
# wheels in .whl and a saved Triton cache in .tcache/tc.tgz.*). Writes logs and the new cache under $OUT.
set -u
OUT=${OUT:-/tmp/anna_out}; mkdir -p "$OUT" /tmp/tc
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
cat .tcache/tc.tgz.* 2>/dev/null | tar xz -C /tmp/tc 2>/dev/null
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  .annawhl/*.whl || exit 1
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.total --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
CFG=tests/qwen35/reference_configs
# 1. prefill / TTFT diagnosis (autotuning events printed)
TRITON_PRINT_AUTOTUNING=1 timeout "${T_PREFILL:-150}" python3 -m anna_core.bench.prefill_profile \
  --model-dir $CFG/Qwen3.5-9B --decode-batch 32 > "$OUT/prefill.log" 2>&1
grep -E "^setup|^prefill|^profiled|^host profile" "$OUT/prefill.log"
# 2. every issue-5 target
timeout "${T_ALL:-280}" python3 -m anna_core.bench.all --configs $CFG --skip-microbench --skip-hf \
  --out "$OUT/bench_all.json" > "$OUT/bench.log" 2>&1
# 3. issue 4 serving benchmark at the 2B shape
PORT=8011
( timeout "${T_SERVE:-170}" anna serve --load-format dummy --model-dir $CFG/Qwen3.5-2B --port $PORT \
  --scheduler-max-batch-size 64 --max-model-len 4096 --log-level warning > "$OUT/serve.log" 2>&1 & )
for i in $(seq 1 90); do python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$PORT/health', timeout=2)" \
  2> /dev/null && break; sleep 1; done; echo "server up after ~$i s"
B="anna bench-serve --base-url http://127.0.0.1:$PORT --prompt-token-ids --ignore-eos --vocab-size 150000 --json"
for spec in "1 6 128 128 single" "64 128 128 128 c64" "16 48 512 32 ttft512"; do
  set -- $spec
  timeout 45 $B --concurrency $1 --num-requests $2 --input-len $3 --output-len $4 --output "$OUT/serve_$5.json" \
    > /dev/null 2>> "$OUT/serve.log"
done
# 4. save the Triton cache for the next session
tar cz -C /tmp/tc . | split -b 15M - "$OUT/tc.tgz."
tail -12 "$OUT/bench.log"
python3 - "$OUT" <<'PY'
import json, sys, pathlib
for f in sorted(pathlib.Path(sys.argv[1]).glob("serve_*.json")):
    r = json.loads(f.read_text())
    print(f.name, json.dumps(r)[:900])
PY
