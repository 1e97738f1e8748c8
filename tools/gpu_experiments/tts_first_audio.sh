#!/usr/bin/env bash
# Issue 27's first audio with the talker's prompts on captured prefill graphs (tts-prefill branch). Three parts, each
# bounded, under 200 s in all:
#  1. tools/gpu_experiments/tts_prefill_check.py (T_CHECK, default 45 s): the tiny fixtures of every kind on real CUDA
#     graphs, prefill graphs on and off: the prompts' replays, and whether the codes equal the eager prefill's and the
#     golden ones (line "tts_prefill_check: ok" or FAILED).
#  2. and 3. python -m anna_audio.tts_bench at the 1.7B shape (SHAPE, default Qwen3-TTS-12Hz-1.7B-Base; random
#     weights, bf16, FRAMES frames, default 125 = 10 s of audio, EOS never chosen) at one request (concurrency 1, RUNS
#     single runs, default 3), with prefill graphs on, then off (--no-prefill-graphs; decode graphs on in both), each
#     bounded by T_RUN (default 70 s). Look at: "one request: first audio ... ms ... RTF" (targets on an H200: first
#     audio <= 60 ms, RTF <= 0.05), "engine steps: ... prefill graph N" (N > 0 with them on, 0 off), "prefill graphs:
#     captured True, prompt lengths [...]", and the closing "first audio" summary (every single run's, both modes).
# Run from the repo root with the Anna wheels installed, e.g. through h200_run.sh:
#   MODE=script SCRIPT=tools/gpu_experiments/tts_first_audio.sh bash anna-core/src/anna_core/bench/h200_run.sh
# Reports go to $OUT/tts_first_audio_{on,off}.json, logs to $OUT/tts_first_audio_{on,off}.log and
# $OUT/tts_prefill_check.log; stdout gets the result lines. Exits non-zero when a part fails.
set -u -o pipefail
OUT=${OUT:-/tmp/anna_out}; mkdir -p "$OUT"
start=$SECONDS
status=0
echo "== tts_prefill_check $(date +%T)"
timeout "${T_CHECK:-45}" python3 tools/gpu_experiments/tts_prefill_check.py > "$OUT/tts_prefill_check.log" 2>&1
rc=$?
grep -E "^(base|custom_voice|voice_design|tts_prefill_check)" "$OUT/tts_prefill_check.log" | cut -c1-400
if [ "$rc" -ne 0 ]; then
  [ "$rc" -eq 124 ] && echo "tts_prefill_check: TIMED OUT"
  echo "tts_prefill_check exit $rc; the log's tail:"; tail -20 "$OUT/tts_prefill_check.log"; status=$rc
fi
for mode in on off; do
  flags=""
  [ "$mode" = off ] && flags="--no-prefill-graphs"
  echo "== tts_bench, prefill graphs $mode $(date +%T)"
  # shellcheck disable=SC2086
  timeout "${T_RUN:-70}" python3 -m anna_audio.tts_bench --shape "${SHAPE:-Qwen3-TTS-12Hz-1.7B-Base}" --dtype bf16 \
    --frames "${FRAMES:-125}" --concurrency 1 --runs "${RUNS:-3}" --out "$OUT/tts_first_audio_$mode.json" $flags \
    > "$OUT/tts_first_audio_$mode.log" 2>&1
  rc=$?
  grep -E "^(tts_bench|one request|engine steps|prefill graphs|decode graphs|vocoder graphs|device split)" \
    "$OUT/tts_first_audio_$mode.log" | cut -c1-600
  echo "tts_bench ($mode) exit $rc ($((SECONDS - start)) s)"
  if [ "$rc" -ne 0 ]; then
    [ "$rc" -eq 124 ] && echo "tts_bench ($mode): TIMED OUT after ${T_RUN:-70} s"
    echo "the log's tail:"; tail -30 "$OUT/tts_first_audio_$mode.log"; status=$rc
  fi
done
python3 - "$OUT" <<'EOF'
import json, sys
from pathlib import Path
for mode in ("on", "off"):
    path = Path(sys.argv[1]) / f"tts_first_audio_{mode}.json"
    if not path.is_file():
        print(f"first audio, prefill graphs {mode}: no report")
        continue
    r = json.loads(path.read_text())
    firsts = sorted(run["first_audio_s"] * 1000 for run in r["one"]["runs"])
    print(f"first audio, prefill graphs {mode}: runs {[round(f, 1) for f in firsts]} ms (median "
          f"{firsts[len(firsts) // 2]:.1f}); best run's RTF {r['one']['rtf']:.4f}; prefill graph steps "
          f"{r['steps']['prefill_graph']}, eager steps {r['steps']['eager']}")
EOF
echo "tts_first_audio done ($((SECONDS - start)) s), status $status"
exit "$status"
