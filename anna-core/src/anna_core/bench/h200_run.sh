#!/usr/bin/env bash
# The GPU benchmark session recorded in BENCHMARKS.md (run from the repository root on the GPU machine,
# with the wheels of anna-core / anna-qwen35 / anna-xpu-kernels / anna-cli in .annawhl, the third-party
# wheels in .whl (tools/gpu_experiments/fetch_device_wheels.sh downloads them) and a saved Triton cache in .tcache/tc.tgz.*). Writes logs and the new cache under $OUT.
#   MODE=targets (default): every issue-5 target, HF transformers + fla side by side at 9B, then the
#   kernel microbenchmarks; the log holds the autotuner's picks, and TIMELINE=1 adds each target's
#   served-step kernel timeline.
#   MODE=ab: the b=1 targets again with asynchronous scheduling off, then with the Triton GEMV off.
#   MODE=repeat: the ONLY targets (default "2B") in REPEAT (default 4) separate processes, logging the
#   autotuning picks of each (run-to-run spread on one machine); TIMELINE=1 adds each run's timeline.
#   MODE=abenv: A/B of the environment switch ABVAR (A: ABVAR=$AVAL, default 0; B: ABVAR=$BVAL, default
#   unset) in REPEAT (default 3) interleaved pairs of processes over the ONLY targets (default "2B");
#   TIMELINE=1 adds each run's kernel timeline (--timeline) to its log.
#   MODE=script: bash SCRIPT (e.g. a tools/gpu_experiments sequence) with this setup, then save the cache.
#   MONITOR=1 (any mode): the GPU's clocks, power, temperature and throttle reasons every 100 ms in $OUT/smi.csv.
#   TAG=x names this run's logs bench_x.log / bench_all_x.json (e.g. an A/B with ANNA_TRITON_PDL=0).
# The device tool returns at most 8 files under $OUT, each under ~16 MB: the cache is split in 15 MB
# parts, and cached binaries of a kernel whose source changed should be pruned before carrying it
# (.tcache carries within the 64 MiB limit only without them).
set -u
OUT=${OUT:-/tmp/anna_out}; mkdir -p "$OUT" /tmp/tc
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
cat .tcache/tc.tgz.* 2>/dev/null | tar xz -C /tmp/tc 2>/dev/null
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  .annawhl/*.whl || exit 1
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.total --format=csv,noheader
python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"
CFG=tests/qwen35/reference_configs
# MONITOR=1: the GPU's clocks, power, temperature and throttle reasons every 100 ms into $OUT/smi.csv
# (a slow process can then be matched against the clock it ran at)
if [ -n "${MONITOR:-}" ] && [ -z "${ANNA_H200_MONITORING:-}" ]; then  # once: not again in nested MODE=script runs
  export ANNA_H200_MONITORING=1
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu,temperature.memory,\
clocks_throttle_reasons.active,utilization.gpu --format=csv -lms 100 > "$OUT/smi.csv" 2>&1 &
  monitor=$!; trap 'kill $monitor 2>/dev/null' EXIT
fi
# the cache without the intermediate IRs (Triton loads a cached kernel from its cubin and metadata): ~5x smaller
save_cache() { find /tmp/tc -type f \( -name '*.llir' -o -name '*.ptx' -o -name '*.ttgir' -o -name '*.ttir' \
  -o -name '*.source' \) -delete; rm -f "$OUT"/tc.tgz.*; tar cz -C /tmp/tc . | split -b 15M - "$OUT/tc.tgz."; }
if [ "${MODE:-targets}" = "targets" ]; then
  # ONLY="9B b=1,2B" runs the targets whose names contain one of these (default: all)
  only=(); IFS=, read -ra names <<< "${ONLY:-}"; for n in "${names[@]}"; do only+=(--only "$n"); done
  # the autotuner's picks go into the log (a slow process can then be compared with a fast one)
  TRITON_PRINT_AUTOTUNING=1 timeout "${T_ALL:-480}" python3 -m anna_core.bench.all --configs $CFG --skip-microbench \
    "${only[@]}" ${TIMELINE:+--timeline} --out "$OUT/bench_all${TAG:+_$TAG}.json" > "$OUT/bench${TAG:+_$TAG}.log" 2>&1
  echo "bench.all exit $?"
  [ -n "${NO_SAVE:-}" ] || save_cache
  tail -16 "$OUT/bench${TAG:+_$TAG}.log"
  [ -n "${SKIP_MICRO:-}" ] && exit 0
  # kernel microbenchmarks (every op vs its reference and fla; linear: Triton GEMV / fused vs cuBLAS)
  timeout "${T_MICRO:-150}" python3 -m anna_xpu_kernels.microbench --linear-rows 1,4 > "$OUT/micro.log" 2>&1
  echo "microbench exit $?"
  [ -n "${NO_SAVE:-}" ] || save_cache
elif [ "${MODE}" = "script" ]; then
  bash "${SCRIPT:?MODE=script needs SCRIPT}"
  echo "script exit $?"
  [ -n "${NO_SAVE:-}" ] || save_cache
elif [ "${MODE}" = "repeat" ]; then
  # the logs in $OUT/repeat_logs.tgz (one file: the tool returns at most 8)
  rm -rf /tmp/repeat; mkdir -p /tmp/repeat
  only=(); IFS=, read -ra names <<< "${ONLY:-2B}"; for n in "${names[@]}"; do only+=(--only "$n"); done
  for i in $(seq 1 "${REPEAT:-4}"); do
    echo "run $i start $(date +%T.%N | cut -c1-12)"
    TRITON_PRINT_AUTOTUNING=1 timeout "${T_ONE:-140}" python3 -m anna_core.bench.all --configs $CFG --skip-microbench \
      --skip-hf "${only[@]}" ${TIMELINE:+--timeline} --out "/tmp/repeat/$i.json" > "/tmp/repeat/$i.log" 2>&1
    echo "run $i exit $? ($(date +%T.%N | cut -c1-12))"; grep -E "^decode|copy ->|replay alone" "/tmp/repeat/$i.log"
    tar czf "$OUT/repeat_logs.tgz" -C /tmp repeat
  done
  [ -n "${NO_SAVE:-}" ] || save_cache
elif [ "${MODE}" = "abenv" ]; then
  # A/B of an environment switch ABVAR (e.g. ANNA_GEMV_NORM_PROLOGUE) in interleaved processes: A with
  # ABVAR=AVAL (default 0), B with ABVAR=BVAL (default: unset), REPEAT (default 3) pairs of the ONLY targets (default "2B");
  # one summary line per run, the logs in $OUT/abenv_logs.tgz (one file: the tool returns at most 8)
  : "${ABVAR:?MODE=abenv needs ABVAR, the environment switch to compare}"
  only=(); IFS=, read -ra names <<< "${ONLY:-2B}"; for n in "${names[@]}"; do only+=(--only "$n"); done
  rm -rf /tmp/abenv; mkdir -p /tmp/abenv
  for i in $(seq 1 "${REPEAT:-3}"); do
    for arm in A B; do
      (if [ "$arm" = A ]; then export "$ABVAR=${AVAL:-0}"; elif [ -n "${BVAL:-}" ]; then export "$ABVAR=$BVAL"
       else unset "$ABVAR"; fi
       timeout "${T_ONE:-170}" python3 -m anna_core.bench.all --configs $CFG --skip-microbench --skip-hf \
         "${only[@]}" ${TIMELINE:+--timeline} --out "/tmp/abenv/$arm$i.json" > "/tmp/abenv/$arm$i.log" 2>&1)
      echo "$arm$i exit $?: $(grep -E '^decode' "/tmp/abenv/$arm$i.log" | head -1) |" \
        "$(grep -o 'replay alone[a-z, ]*: [0-9.]* ms' "/tmp/abenv/$arm$i.log" | head -1) |" \
        "$(grep -o 'at [0-9]* GB/s copy' "/tmp/abenv/$arm$i.log" | head -1)"
      tar czf "$OUT/abenv_logs.tgz" -C /tmp abenv
    done
  done
  [ -n "${NO_SAVE:-}" ] || save_cache
else
  # the GEMV serves linear and the fused ops built on it; with them off each op runs its torch
  # reference (F.linear and torch's norm / activation ops)
  for variant in "--no-async-scheduling" "--disable-kernel linear:triton --disable-kernel linear_silu_mul:triton --disable-kernel add_rms_norm_linear:triton --disable-kernel add_rms_norm_linear_silu_mul:triton"; do
    tag=$(echo "$variant" | tr -dc 'a-z')
    timeout "${T_AB:-200}" python3 -m anna_core.bench.all --configs $CFG --skip-microbench --skip-hf \
      --only "b=1" $variant --out "$OUT/ab_$tag.json" > "$OUT/ab_$tag.log" 2>&1
    echo "== $variant"; tail -6 "$OUT/ab_$tag.log"
  done
  save_cache
fi
