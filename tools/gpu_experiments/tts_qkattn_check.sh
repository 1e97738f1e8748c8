#!/usr/bin/env bash
# Issue 27: the talker's and the code predictor's q/k norms, rotary, cache write and attention as one op
# (qk_norm_rope_cache_attention: one attention launch a layer for each talker decode step and each predictor pass of
# one query per row, against qk_norm_rope_cache + paged_attention; the talker's prefills run the op's own two
# kernels), opt-in through ANNA_QK_NORM_ROPE_ATTENTION until this measures it. The switch turns both on, so the A/B
# below covers the talker too. Three parts, each bounded, under 240 s in all:
#  1. the CUDA conformance of the new op (T_CONF, default 25 s): "qk_norm_rope_cache_attention:triton" against its
#     reference on its examples, float32 and bfloat16 (the test file sets the switch), and which implementation the
#     op table gives the talker's and predictor's head dim (128) with the switch off / on ("op off: None", "op on:
#     ...triton...").
#  2. python -m anna_audio.tts_bench twice (no reference; the 1.7B shape, bf16, FRAMES frames a request, CONC
#     concurrent, 2 single runs), ANNA_QK_NORM_ROPE_ATTENTION=0 then =1, each bounded by T_RUN (default 95 s). Per
#     run look for "one request: ... RTF" (target <= 0.05; 0.0506 before on an H200), "16 concurrent: ... (xN of
#     one)" (target <= 2x; 2.25x before) and "device split at 1 / 16 request(s)": the code predictor's ms a frame
#     (2.43 / 4.18 before on an H200, of a decode step of 3.61 / 5.94); the talker's share is the decode step's ms
#     minus the predictor's (1.18 / 1.76 before). The op should be made the default only where "on" gives the lower
#     predictor ms and the lower decode-step ms at both batch sizes (the talker and predictor share the switch).
# Run from the repo root with the Anna wheels installed, e.g. through h200_run.sh:
#   MODE=script SCRIPT=tools/gpu_experiments/tts_qkattn_check.sh bash anna-core/src/anna_core/bench/h200_run.sh
# Logs: $OUT/tts_qkattn_conformance.log, $OUT/tts_qkattn_{off,on}.{log,json}. Exits non-zero when a part fails.
set -u -o pipefail
OUT=${OUT:-/tmp/anna_out}; mkdir -p "$OUT"
start=$SECONDS
status=0
echo "== conformance $(date +%T)"
timeout "${T_CONF:-25}" python3 -m pytest -q -p no:cacheprovider tools/gpu_experiments/test_kernel_conformance_cuda.py \
  -k qk_norm_rope_cache_attention > "$OUT/tts_qkattn_conformance.log" 2>&1
rc=$?
tail -3 "$OUT/tts_qkattn_conformance.log"
if [ "$rc" -ne 0 ]; then
  [ "$rc" -eq 124 ] && echo "conformance: TIMED OUT"
  echo "conformance exit $rc; the log's tail:"; tail -30 "$OUT/tts_qkattn_conformance.log"; status=$rc
fi
timeout 20 python3 - <<'EOF' 2>&1 | tail -3
import os
from anna_core.kernels import KernelRegistry, ProbeRequest
for value in ("0", "1"):
    os.environ["ANNA_QK_NORM_ROPE_ATTENTION"] = value
    fn = KernelRegistry.from_plugins().get_accelerated("qk_norm_rope_cache_attention",
                                                        ProbeRequest("cuda", "bfloat16", {"head_dim": 128}))
    print(f"op {'on' if value == '1' else 'off'}: {fn if fn is None else fn.__module__ + '.' + fn.__name__}")
EOF
for mode in off on; do
  value=0; [ "$mode" = on ] && value=1
  echo "== ANNA_QK_NORM_ROPE_ATTENTION=$value ($((SECONDS - start)) s in)"
  ANNA_QK_NORM_ROPE_ATTENTION=$value timeout "${T_RUN:-95}" python3 -m anna_audio.tts_bench \
    --shape "${SHAPE:-Qwen3-TTS-12Hz-1.7B-Base}" --dtype bf16 --frames "${FRAMES:-125}" --concurrency "${CONC:-16}" \
    --runs 2 --out "$OUT/tts_qkattn_$mode.json" > "$OUT/tts_qkattn_$mode.log" 2>&1
  rc=$?
  grep -E "^(tts_bench|one request|[0-9]+ concurrent|engine steps|decode graphs|device split)" \
    "$OUT/tts_qkattn_$mode.log" | cut -c1-600
  if [ "$rc" -ne 0 ]; then
    [ "$rc" -eq 124 ] && echo "fused op $mode: TIMED OUT after ${T_RUN:-95} s"
    echo "fused op $mode: FAILED (exit $rc); the log's tail:"; tail -30 "$OUT/tts_qkattn_$mode.log"; status=$rc
  fi
done
echo "tts_qkattn_check.sh done in $((SECONDS - start)) s, exit $status"
exit "$status"
