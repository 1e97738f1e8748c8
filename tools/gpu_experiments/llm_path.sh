#!/usr/bin/env bash
# The Python API (LLM with its defaults) against anna bench in one process per model (issue "fast by
# default"): python -m anna_core.bench.llm_path for each MODELS entry (default "Qwen3.5-9B"). Run it through
# h200_run.sh (MODE=script SCRIPT=tools/gpu_experiments/llm_path.sh) with .whl, .annawhl and .tcache carried.
# ALSO="max_model_len=4096" also measures LLM with those keyword arguments.
set -u
IFS=, read -ra models <<< "${MODELS:-Qwen3.5-9B}"
for m in "${models[@]}"; do
  start=$SECONDS
  timeout "${T_RUN:-300}" python3 -m anna_core.bench.llm_path --model-dir "tests/qwen35/reference_configs/$m" \
    --out "$OUT/llm_path_$m.json" ${ALSO:+--also "$ALSO"} > "$OUT/llm_path_$m.log" 2>&1
  echo "$m exit $? ($((SECONDS - start)) s)"; grep -E "^(copy|anna bench|LLM)" "$OUT/llm_path_$m.log"
  grep -E "captured|warm|Error|error" "$OUT/llm_path_$m.log" | tail -8
done
