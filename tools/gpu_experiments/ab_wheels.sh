#!/usr/bin/env bash
# A/B of two builds of Anna on the GPU: the wheels in .annawhl_base (e.g. the previous commit's, built with
# `pip wheel --no-deps -w .annawhl_base <its anna-core anna-qwen35 anna-xpu-kernels anna-cli>`) against those
# in .annawhl, in interleaved processes, over the ONLY targets of anna_core.bench.all (default "2B,0.8B"),
# ROUNDS times (default 2). Run it through h200_run.sh (MODE=script SCRIPT=tools/gpu_experiments/ab_wheels.sh)
# with .whl, .annawhl, .annawhl_base and .tcache carried; the logs come back in $OUT/ab_logs.tgz.
# SKIP_HF=1 leaves out the HF transformers comparison (~25 s per 9B process; the decode figures come first).
set -u
only=(); IFS=, read -ra names <<< "${ONLY:-2B,0.8B}"; for n in "${names[@]}"; do only+=(--only "$n"); done
for v in base new; do
  w=.annawhl; [ "$v" = base ] && w=.annawhl_base
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "/tmp/site_$v" \
    .whl/*.whl "$w"/*.whl || exit 1
done
logs=()
for i in $(seq "${ROUNDS:-2}"); do
  for v in base new; do
    PYTHONPATH="/tmp/site_$v" TRITON_PRINT_AUTOTUNING=1 timeout "${T_RUN:-200}" python3 -m anna_core.bench.all \
      --configs tests/qwen35/reference_configs --skip-microbench ${SKIP_HF:+--skip-hf} "${only[@]}" \
      --out "$OUT/ab_${v}_$i.json" \
      > "/tmp/ab_${v}_$i.log" 2>&1
    echo "$v round $i exit $? (t=${SECONDS}s)"; grep -E "^(9B|2B|0.8B) |copy|replay alone" "/tmp/ab_${v}_$i.log"
    logs+=("ab_${v}_$i.log")
  done
done
tar czf "$OUT/ab_logs.tgz" -C /tmp "${logs[@]}"
