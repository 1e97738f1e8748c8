#!/usr/bin/env bash
# Gemma 4 benchmarks on the H200 (issue 23): `anna bench` on dummy weights at the released shapes, one run per
# entry of RUNS ("shape:batch:input_len:output_len[:flag...]", flags given as --flag without the dashes, e.g.
# "E2B:1:512:128:profile:compare-hf:hf-output-len=32"; a shape such as Qwen3.5-35B-A3B names a Qwen3.5 config); each run's JSON and log go into $OUT/gemma4_bench.tgz (the device tool
# returns few files), with one summary line each on stdout. EXTRA_FLAGS: more `anna bench` flags for every run (flags
# whose value holds a colon, e.g. EXTRA_FLAGS="--disable-kernel per_layer_inputs:triton", cannot go in RUNS).
set -u
FINAL_OUT=$OUT; OUT=$(mktemp -d)
RUNS=${RUNS:-"E2B:1:512:128:profile E4B:1:512:128:profile"}
for run in $RUNS; do
  IFS=: read -r shape batch inp outp rest <<< "$run"
  flags=(); IFS=: read -ra extra <<< "${rest:-}"; for f in "${extra[@]}"; do
    [ -z "$f" ] && continue
    if [[ $f == *=* ]]; then flags+=("--${f%%=*}" "${f#*=}"); else flags+=("--$f"); fi
  done
  tag=${rest//[:=]/_}; name="g4_${shape}_b${batch}_i${inp}${tag:+_${tag:0:40}}"  # flags in the name: runs differing only in flags keep their files
  # a shape starting with "Qwen" is one of tests/qwen35/reference_configs (e.g. Qwen3.5-35B-A3B), else a Gemma 4 shape
  if [[ $shape == Qwen* ]]; then dir="tests/qwen35/reference_configs/$shape"; else dir="tests/gemma4/reference_configs/gemma-4-$shape-it"; fi
  start=$SECONDS
  timeout "${T_RUN:-240}" anna bench --model-dir "$dir" --batch-size "$batch" \
    --input-len "$inp" --output-len "$outp" --runs "${NRUNS:-2}" "${flags[@]}" ${EXTRA_FLAGS:-} --json > "$OUT/$name.json" 2> "$OUT/$name.log"
  echo "== $name exit $? ($((SECONDS - start)) s)"
  python3 - "$OUT/$name.json" <<'PY'
import json, sys
t = open(sys.argv[1]).read()
if "{" not in t:
    sys.exit(0)
r = json.loads(t[t.index("{"):])
keep = ("decode_tokens_per_s_per_stream", "decode_tokens_per_s_total", "ttft_ms", "roofline_fraction",
        "roofline_tokens_per_s_per_stream", "copy_bandwidth_gbps", "graphs_captured", "graph_steps", "eager_steps",
        "prefill_graph_steps", "served_vs_eager_match_tokens", "setup_s", "load_s", "itl_ms_p50", "peak_memory_gib",
        "lm_head_path", "weight_quant", "weights")
print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items() if k in keep})
print("kernels", r.get("kernels"))
for k, v in r.items():
    if k.startswith("hf") or k.startswith("profile") or k.startswith("timeline_"):
        print(k, json.dumps(v)[:1500])
if r.get("timeline"):
    from collections import defaultdict
    acc = defaultdict(lambda: [0, 0.0, 0.0])
    for row in r["timeline"]:
        a = acc[row["name"][:70]]
        a[0] += 1; a[1] += row["dur_us"]; a[2] += row["exposed_us"]
    total = sum(a[2] for a in acc.values())
    print(f"timeline: {len(r['timeline'])} kernels, {total:.0f} us exposed")
    for name, (n, dur, exp) in sorted(acc.items(), key=lambda kv: -kv[1][2])[:25]:
        print(f"  {n:4d} x {name:70s} dur {dur:8.1f} exposed {exp:8.1f}")
PY
  grep -iE "warning|error|capture fail|Traceback" "$OUT/$name.log" | cut -c1-300 | sort | uniq -c | head -8
done
tar czf "$FINAL_OUT/gemma4_bench.tgz" -C "$OUT" .
