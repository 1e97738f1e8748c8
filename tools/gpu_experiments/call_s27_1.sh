set -u
# Twenty-seventh session, first GPU call (about 480 s warm; the TTS runs compile their kernels on a cold cache):
# issue 27 (Qwen3-TTS 1.7B, bf16): the code predictor's draw of each codebook as one `top_k_gumbel_sample` kernel
# (new default; 15 draws a frame, each the float conversion, division, topk, comparison, fill, subtraction and
# argmax before) A/B against the composition (--disable-kernel top_k_gumbel_sample:triton), then with
# ANNA_GEMV_MAX_ROWS=16 (the 16-concurrent predictor's 16-row GEMVs); the op's conformance on the GPU first.
#   MODE=script SCRIPT=tools/gpu_experiments/call_s27_1.sh bash anna-core/src/anna_core/bench/h200_run.sh
# Read "one request" (RTF, first audio), "16 concurrent ... (xN of one)" and "device split" per arm.
. tools/gpu_experiments/copy_bandwidth.sh
echo "== conformance top_k_gumbel_sample $(date +%T)"
timeout "${T_CHECK:-90}" python3 -m pytest -q -p no:cacheprovider tools/gpu_experiments/test_kernel_conformance_cuda.py \
  -k top_k_gumbel > "$OUT/gumbel_check.log" 2>&1
echo "exit $?"; tail -2 "$OUT/gumbel_check.log" | cut -c1-300
tts() {  # tts NAME ENV... -- ARGS... : one tts_bench run
  local name=$1; shift; local env=(); while [ "$1" != "--" ]; do env+=("$1"); shift; done; shift
  echo "== TTS $name (${env[*]:-} $*) $(date +%T)"
  env "${env[@]}" timeout "${T_TTS:-120}" python3 -m anna_audio.tts_bench --shape Qwen3-TTS-12Hz-1.7B-Base \
    --dtype bf16 --frames 125 --concurrency 16 --runs "${RUNS:-3}" --out "$OUT/tts_$name.json" "$@" \
    > "$OUT/tts_$name.log" 2>&1
  echo "exit $?"; grep -E "^(one request|[0-9]+ concurrent|device split|decode graphs)" "$OUT/tts_$name.log" | cut -c1-300
}
tts new --
tts old -- --disable-kernel top_k_gumbel_sample:triton
tts new2 --
tts rows16 ANNA_GEMV_MAX_ROWS=16 --
echo "== done $(date +%T)"
