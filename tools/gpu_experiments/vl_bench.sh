#!/usr/bin/env bash
# Issue 25's vision-language benchmark at the Qwen3.5-9B shape with random weights, in one process
# (python -m anna_core.bench.vl_bench, see its docstring): TTFT of one chat with a 1024x1024 image and with an
# 8-frame 640x480 video, the decode ITL of 8 text streams while 4 image requests prefill beside them, and HF
# transformers' image TTFT on the same weights and processor inputs. Run through h200_run.sh:
#   MODE=script SCRIPT=tools/gpu_experiments/vl_bench.sh bash anna-core/src/anna_core/bench/h200_run.sh
# SHAPE (default Qwen3.5-9B) names a folder of tests/qwen35/reference_configs with a vision_config (CONFIG: any
# folder with such a config.json, e.g. a tiny checkpoint for a CPU check); VL_FLAGS adds
# flags (e.g. "--skip-hf", "--runs 5"); T_VL (default 330) bounds the benchmark's seconds. The report goes to
# $OUT/vl_bench.json, the whole log to $OUT/vl_bench.log; stdout gets the result lines. Any failure (a timeout
# included) prints the log's tail and exits non-zero.
set -u -o pipefail
OUT=${OUT:-/tmp/anna_out}; mkdir -p "$OUT"
dir=$(mktemp -d)/vl-shape
# images are drawn and preprocessed with Pillow (an anna-core dependency the h200_run.sh wheel set may lack)
python3 -c "import PIL" 2>/dev/null || { echo "vl_bench: FAILED: Pillow is not importable (add its wheel to .whl)"; exit 1; }
python3 -c "import sys; from anna_core.testing.checkpoints import write_vl_shape_folder as w; w(sys.argv[1], sys.argv[2])" \
  "${CONFIG:-tests/qwen35/reference_configs/${SHAPE:-Qwen3.5-9B}}" "$dir" > "$OUT/vl_bench.log" 2>&1 || {
  echo "vl_bench: FAILED writing the benchmark folder"; tail -20 "$OUT/vl_bench.log"; exit 1; }
start=$SECONDS
# shellcheck disable=SC2086
timeout "${T_VL:-330}" python3 -m anna_core.bench.vl_bench --model-dir "$dir" --out "$OUT/vl_bench.json" ${VL_FLAGS:-} \
  >> "$OUT/vl_bench.log" 2>&1
rc=$?
grep -E "^(vl_bench|image TTFT|video TTFT|text TTFT|decode beside|HF image)" "$OUT/vl_bench.log"
echo "vl_bench exit $rc ($((SECONDS - start)) s)"
if [ "$rc" -ne 0 ]; then
  [ "$rc" -eq 124 ] && echo "vl_bench: TIMED OUT after ${T_VL:-330} s"
  echo "vl_bench: FAILED; the log's tail:"; tail -30 "$OUT/vl_bench.log"; exit "$rc"
fi
