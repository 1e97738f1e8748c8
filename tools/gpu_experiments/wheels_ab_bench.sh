#!/usr/bin/env bash
# A/B of two builds of Anna through `anna bench` (eighteenth session): the wheels in .annawhl_base against those
# in .annawhl, each in its own target folder, over RUNS ("shape:batch:input_len:output_len[:flag...]" as in
# gemma4_bench.sh; a shape starting with "Qwen" names a Qwen3.5 reference config), new first, then base, ROUNDS
# times (default 1). PRE (optional) is a command run first with the new build (e.g. a kernel microbenchmark);
# NEW_FLAGS (optional) are anna bench flags for the new build's runs only (e.g. --timeline); NEW_ENV (optional)
# is environment assignments for the new build's runs only (e.g. "ANNA_QKV_NORM_ROPE=0 ANNA_Q_NORM_ROPE_ATTENTION=0",
# to switch fusions of the new build off one at a time against the base).
# Run it through h200_run.sh (MODE=script SCRIPT=tools/gpu_experiments/wheels_ab_bench.sh) with .whl, .annawhl,
# .annawhl_base and .tcache carried; one summary line per run; logs and JSONs in $OUT/ab_bench.tgz.
set -u
for v in base new; do
  w=.annawhl; [ "$v" = base ] && w=.annawhl_base
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "/tmp/site_$v" \
    .whl/*.whl "$w"/*.whl || exit 1
done
L=$(mktemp -d)
if [ -n "${PRE:-}" ]; then
  PYTHONPATH=/tmp/site_new PATH=/tmp/site_new/bin:$PATH timeout "${T_PRE:-200}" bash -c "$PRE" 2>&1 | tee "$L/pre.log"
fi
for i in $(seq "${ROUNDS:-1}"); do
  for run in ${RUNS:?}; do
    IFS=: read -r shape batch inp outp rest <<< "$run"
    flags=(); IFS=: read -ra extra <<< "${rest:-}"; for f in "${extra[@]}"; do
      [ -z "$f" ] && continue
      if [[ $f == *=* ]]; then flags+=("--${f%%=*}" "${f#*=}"); else flags+=("--$f"); fi
    done
    if [[ $shape == Qwen* ]]; then dir="tests/qwen35/reference_configs/$shape"; else dir="tests/gemma4/reference_configs/gemma-4-$shape-it"; fi
    for v in new base; do
      name="${v}_${shape}_b${batch}_i${inp}_r$i"; start=$SECONDS
      more=(); [ "$v" = new ] && [ -n "${NEW_FLAGS:-}" ] && read -ra more <<< "$NEW_FLAGS"
      envs=(); [ "$v" = new ] && [ -n "${NEW_ENV:-}" ] && read -ra envs <<< "$NEW_ENV"
      env "${envs[@]}" PYTHONPATH=/tmp/site_$v PATH=/tmp/site_$v/bin:$PATH timeout "${T_RUN:-200}" anna bench --model-dir "$dir" \
        --batch-size "$batch" --input-len "$inp" --output-len "$outp" --runs "${NRUNS:-1}" "${flags[@]}" "${more[@]}" --json \
        > "$L/$name.json" 2> "$L/$name.log"
      rc=$?
      python3 - "$L/$name.json" "$name" "$rc" "$((SECONDS - start))" <<'PY'
import json, sys
t = open(sys.argv[1]).read()
if "{" not in t:
    print(f"{sys.argv[2]}: exit {sys.argv[3]} ({sys.argv[4]} s), no result"); sys.exit(0)
r = json.loads(t[t.index("{"):])
print(f"{sys.argv[2]}: {r.get('decode_tokens_per_s_per_stream', 0):.1f} tok/s/stream, "
      f"total {r.get('decode_tokens_per_s_total', 0):.1f}, TTFT {r.get('ttft_ms', 0):.1f} ms, "
      f"roofline {r.get('roofline_fraction', 0):.3f}, copy {r.get('copy_bandwidth_gbps', 0):.0f} GB/s ({sys.argv[4]} s)")
if r.get("timeline"):
    from collections import defaultdict
    acc = defaultdict(lambda: [0, 0.0])
    for row in r["timeline"]:
        a = acc[row["name"][:60]]; a[0] += 1; a[1] += row["exposed_us"]
    print(f"  timeline {sum(a[1] for a in acc.values()):.0f} us exposed: " + "; ".join(
        f"{n} x{c} {e:.0f}" for n, (c, e) in sorted(acc.items(), key=lambda kv: -kv[1][1])[:12]))
PY
      grep -iE "Traceback|Error" "$L/$name.log" | head -3
    done
  done
done
tar czf "$OUT/ab_bench.tgz" -C "$L" .
