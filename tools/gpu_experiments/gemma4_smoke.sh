#!/usr/bin/env bash
# First GPU run of the Gemma 4 text family (issue 23): anna bench at batch 1 on dummy weights at released shapes
# (MODELS, default E2B and E4B), the runner's set-up log (graphs captured or not) and the chosen kernels.
set -u
IFS=, read -ra models <<< "${MODELS:-gemma-4-E2B-it,gemma-4-E4B-it}"
for m in "${models[@]}"; do
  start=$SECONDS
  timeout "${T_RUN:-200}" anna bench --model-dir "tests/gemma4/reference_configs/$m" --batch-size 1 --input-len 512 \
    --output-len 128 --runs 2 --json > "$OUT/gemma4_$m.json" 2> "$OUT/gemma4_$m.log"
  echo "$m exit $? ($((SECONDS - start)) s)"
  python3 - "$OUT/gemma4_$m.json" <<'PY'
import json, sys
t = open(sys.argv[1]).read()
if "{" not in t:
    sys.exit(0)
r = json.loads(t[t.index("{"):])
print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items() if k in (
    "decode_tokens_per_s_per_stream", "ttft_ms", "roofline_fraction", "copy_bandwidth_gbps", "graphs_captured",
    "graph_steps", "eager_steps", "prefill_graph_steps", "served_vs_eager_match_tokens", "setup_s", "itl_ms_p50")})
PY
  grep -iE "warning|error|capture|set-up" "$OUT/gemma4_$m.log" | cut -c1-300 | tail -6
done
