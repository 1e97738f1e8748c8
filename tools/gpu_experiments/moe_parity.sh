#!/usr/bin/env bash
# Qwen3.5-35B-A3B bf16 parity against HF on the H200 (issue 24): the full config and a 4-layer cut of it (whose
# float32 oracle fits), each with the Triton moe_experts and with its torch reference (--disable-kernel), via
# `anna bench --compare-hf`. Prints each run's `hf` block; logs in $OUT/moe_parity.tgz.
set -u
LOGS=$(mktemp -d); CUT=/tmp/q35moe_l${CUT_LAYERS:-4}
python3 - "$CUT" "${CUT_LAYERS:-4}" <<'PY'
import json, os, sys
src = "tests/qwen35/reference_configs/Qwen3.5-35B-A3B/config.json"
c = json.load(open(src)); tc = c.get("text_config", c); n = int(sys.argv[2])
tc["num_hidden_layers"] = n
if "layer_types" in tc:
    tc["layer_types"] = tc["layer_types"][:n]
os.makedirs(sys.argv[1], exist_ok=True); json.dump(c, open(os.path.join(sys.argv[1], "config.json"), "w"))
PY
RUNS=${RUNS:-"cut:triton cut:reference full:reference full:triton"}
for run in $RUNS; do
  IFS=: read -r which impl <<< "$run"
  dir=$CUT; [ "$which" = full ] && dir=tests/qwen35/reference_configs/Qwen3.5-35B-A3B
  extra=(); [ "$impl" = reference ] && extra=(--disable-kernel moe_experts:triton --no-cuda-graph)
  name="parity_${which}_${impl}"
  timeout "${T_RUN:-150}" anna bench --model-dir "$dir" --batch-size 1 --input-len "${INPUT_LEN:-512}" --output-len 32 \
    --runs 1 --compare-hf --hf-output-len 16 "${extra[@]}" --json > "$LOGS/$name.json" 2> "$LOGS/$name.log"
  echo "== $name exit $?"
  python3 -c "
import json; t=open('$LOGS/$name.json').read(); r=json.loads(t[t.index('{'):]) if '{' in t else {}
print({k: r.get(k) for k in ('decode_tokens_per_s_per_stream', 'graph_steps', 'eager_steps', 'kernels')}); print(r.get('hf'))"
  grep -iE "error|Traceback" "$LOGS/$name.log" | cut -c1-300 | sort | uniq -c | head -5
done
tar czf "$OUT/moe_parity.tgz" -C "$LOGS" .
