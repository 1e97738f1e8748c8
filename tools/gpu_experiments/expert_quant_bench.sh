#!/usr/bin/env bash
# Issue 29, --expert-quant: `anna bench` at the Qwen3.5-35B-A3B shape (dummy weights), batch 1, bf16 experts vs
# --expert-quant int4 / int8 / fp8 (the projections stay bf16 in every run). Each run is bounded by `timeout 120`
# (T_RUN overrides); total < 300 s on an H100/H200 when loads are quick (MODES="none int4" runs a subset).
# Logs and JSON reports in $OUT; a summary line per mode on stdout.
# CHECK=1 first runs expert_quant_check.py --quick (kernel errors vs the reference, times vs bf16, graph replay;
# bounded by `timeout 90`).
set -u
MODEL=tests/qwen35/reference_configs/Qwen3.5-35B-A3B
OUT=${OUT:-$(mktemp -d)}
if [ "${CHECK:-0}" = 1 ]; then
  timeout 90 python3 tools/gpu_experiments/expert_quant_check.py --quick > "$OUT/expert_quant_check.log" 2>&1
  echo "expert_quant_check exit $?"; grep -E "^(check|graph)" "$OUT/expert_quant_check.log" | cut -c1-200
fi
for mode in ${MODES:-none int4 int8 fp8}; do
  timeout "${T_RUN:-120}" anna bench --model-dir "$MODEL" --device cuda --dtype bf16 --load-format dummy \
    --expert-quant "$mode" --batch-size 1 --input-len 256 --output-len 64 --warmup 1 --runs 1 --json \
    > "$OUT/expert_quant_$mode.json" 2> "$OUT/expert_quant_$mode.log"
  rc=$?
  python3 - "$OUT/expert_quant_$mode.json" "$mode" "$rc" <<'PY'
import json, sys
path, mode, rc = sys.argv[1:]
text = open(path).read()
r = json.loads(text[text.index("{"):]) if "{" in text else {}
keys = ("decode_tokens_per_s_per_stream", "ttft_ms", "load_s", "peak_memory_gib", "graphs_captured", "eager_steps",
        "roofline_fraction", "kernels")
print(f"expert-quant {mode} exit {rc}:", {k: r.get(k) for k in keys})
PY
  grep -iE "error|capture fail|Traceback" "$OUT/expert_quant_$mode.log" | cut -c1-300 | sort | uniq -c | head -5
done
