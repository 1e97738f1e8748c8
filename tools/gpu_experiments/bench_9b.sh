# Sourced by GPU call scripts after they define `left` (seconds of their budget still left):
#   bench NAME BOUND [VAR=value ...] -- [anna bench flags]
# runs `anna bench` at the Qwen3.5-9B shape, batch 1, 512-token prompt, 128 tokens, one run, when BOUND seconds are
# left; the report in $OUT/b1_NAME.json (its log beside it) and its summary printed.
bench() {
  local name=$1 bound=$2; shift 2
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  if [ "$(left)" -lt "$bound" ]; then echo "== 9B b1 $name skipped ($(left) s left, needs $bound)"; return; fi
  echo "== 9B b1 $name $(date +%T)"
  env "${envs[@]}" timeout "$bound" anna bench --model-dir tests/qwen35/reference_configs/Qwen3.5-9B --batch-size 1 \
    --input-len 512 --output-len 128 --runs 1 "$@" --json > "$OUT/b1_$name.json" 2> "$OUT/b1_$name.log"
  echo "exit $? $(date +%T)"; python3 tools/gpu_experiments/bench_summary.py "$OUT/b1_$name.json"
}
