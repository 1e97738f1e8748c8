#!/usr/bin/env bash
# Issue 24, expert offload on the H200: `anna bench` on Qwen3.5-35B-A3B (dummy weights, bf16, batch 1) fully
# resident (decode and prefill graphs: the fast path's tok/s; then eagerly, the tokens offloaded runs must equal),
# then `--offload-mode experts --max-device-memory-gib $CAP` with `--cached-experts-per-layer` each of $CACHES.
# Prints per run: decode tok/s, TTFT, the device peak (torch.cuda.max_memory_allocated since before loading) and
# whether it stayed under the cap, the expert cache's hit rate and copied bytes, and whether tokens_sha256 equals
# the resident runs'. JSON and logs in $OUT/offload_bench.tgz.
#   MODEL_DIR (default the 35B-A3B config), DEVICE (auto), DTYPE (bf16), CAP (24), CACHES ("0 16 64"),
#   INPUT_LEN (64), OUTPUT_LEN (48), RESIDENT_GRAPHS (1), RESIDENT_EAGER (1), PREFETCH (1; 0 adds
#   --no-expert-prefetch), T_RUN (seconds per run, 300). On a CPU (DEVICE=cpu DTYPE=fp32, a tiny MoE folder) it
#   runs the same steps, for checking the script.
set -u
FINAL_OUT=${OUT:?OUT must name the folder for the results}; LOGS=$(mktemp -d)
MODEL_DIR=${MODEL_DIR:-tests/qwen35/reference_configs/Qwen3.5-35B-A3B}
CAP=${CAP:-24}
COMMON=(--model-dir "$MODEL_DIR" --device "${DEVICE:-auto}" --dtype "${DTYPE:-bf16}" --load-format dummy
        --batch-size 1 --input-len "${INPUT_LEN:-64}" --output-len "${OUTPUT_LEN:-48}" --runs 1 --warmup 1 --json)
PREFETCH_FLAG=(); [ "${PREFETCH:-1}" = 0 ] && PREFETCH_FLAG=(--no-expert-prefetch)
run() {
  local name=$1; shift
  local start=$SECONDS
  timeout "${T_RUN:-300}" anna bench "${COMMON[@]}" "$@" > "$LOGS/$name.json" 2> "$LOGS/$name.log"
  echo "== $name exit $? ($((SECONDS - start)) s)"
  grep -iE "error|Traceback|out of memory" "$LOGS/$name.log" | cut -c1-300 | sort | uniq -c | head -5
}
[ "${RESIDENT_GRAPHS:-1}" = 1 ] && run resident --offload-mode none
[ "${RESIDENT_EAGER:-1}" = 1 ] && run resident_eager --offload-mode none --no-cuda-graph
for c in ${CACHES:-0 16 64}; do
  run "offload_c$c" --offload-mode experts --max-device-memory-gib "$CAP" --cached-experts-per-layer "$c" \
    "${PREFETCH_FLAG[@]}"
done
python3 - "$LOGS" "$CAP" <<'PY'
import json, pathlib, sys

logs, cap = pathlib.Path(sys.argv[1]), float(sys.argv[2])


def report(name):
    path = logs / f"{name}.json"
    text = path.read_text() if path.exists() else ""
    return json.loads(text[text.index("{"):]) if "{" in text else None


runs = {p.stem: report(p.stem) for p in sorted(logs.glob("*.json"), key=lambda p: (not p.stem.startswith("resident"),
                                                                                    p.stat().st_mtime))}
ref = {k: r["tokens_sha256"] for k, r in runs.items() if r and k.startswith("resident")}
print("resident tokens_sha256:", ref or "none (resident runs failed or skipped)")
if len(set(ref.values())) > 1:
    print("NOTE: the resident graph and eager runs differ (the graph run's served_vs_eager_match_tokens says where)")
for name, r in runs.items():
    if r is None:
        print(f"{name:16s} no report (see {name}.log)")
        continue
    line = (f"{name:16s} decode {r['decode_tokens_per_s_per_stream']:8.2f} tok/s  TTFT {r['ttft_ms']:9.1f} ms  "
            f"peak {r['peak_memory_gib']:6.2f} GiB  load {r['load_s']:5.1f} s  graphs {r['graphs_captured']}  "
            f"served=eager {r['served_vs_eager_match_tokens']} tokens")
    cache = r.get("expert_cache")
    if cache:
        rate = "n/a" if cache["hit_rate"] is None else f"{100 * cache['hit_rate']:.1f}%"
        line += (f"  cap {cap} GiB {'OK' if r['peak_memory_gib'] <= cap else 'EXCEEDED'}  hit rate {rate} "
                 f"({cache['hits']} hits, {cache['misses']} misses, prefetched {cache['prefetched']}, "
                 f"{cache['prefetch_hits']} used)  copied {cache['bytes_copied'] / 1e9:.1f} GB")
    same = {k: r["tokens_sha256"] == v for k, v in ref.items() if k != name}
    line += f"  tokens == {same}" if same else f"  sha {r['tokens_sha256'][:16]}"
    print(line)
PY
tar czf "$FINAL_OUT/offload_bench.tgz" -C "$LOGS" .
