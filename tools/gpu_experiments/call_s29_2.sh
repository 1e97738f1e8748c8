set -u
# Twenty-ninth session, issue 29's kernels on the GPU (at most ~540 s; steps run while their bound is left of BUDGET,
# default 520 s): the quantized GEMVs' conformance on CUDA with the FP8 codes converted in hardware
# (ANNA_WQ_FP8_CVT=1, the default since), wq_fp8_cvt_check.py (the FP8 decode GEMV with and without it at the 9B
# decode shapes: equal outputs at equal configurations, times), then the int4 decode GEMV of the build before the
# pairing (.annawhl_base: one code per shift) against this one with ANNA_WQ_INT4_PAIRED=1 (two codes per shift; the
# pairing was this build's default when the session ran it) with wq_gemv_bench.py at one row.
#   MODE=script SCRIPT=tools/gpu_experiments/call_s29_2.sh bash anna-core/src/anna_core/bench/h200_run.sh
# (carry .whl, .annawhl, .annawhl_base, .tcache)
. tools/gpu_experiments/copy_bandwidth.sh
budget=${BUDGET:-520}
left() { echo $((budget - SECONDS)); }
step() {  # step NAME BOUND command...: runs when BOUND seconds are left; its output to $OUT/NAME.log, the tail shown
  local name=$1 bound=$2; shift 2
  if [ "$(left)" -lt "$bound" ]; then echo "== $name skipped ($(left) s left, needs $bound)"; return; fi
  echo "== $name $(date +%T)"
  timeout "$bound" "$@" > "$OUT/$name.log" 2>&1
  echo "exit $?"; grep -vE "^(Triton autotuning|best config|  |USDT)" "$OUT/$name.log" | cut -c1-230 | tail -"${TAIL:-24}"
}
step conformance "${T_CONF:-100}" env ANNA_WQ_FP8_CVT=1 python3 -m pytest -q -p no:cacheprovider \
  tools/gpu_experiments/test_kernel_conformance_cuda.py -k "wq_linear"
step fp8_cvt "${T_CVT:-150}" python3 tools/gpu_experiments/wq_fp8_cvt_check.py --rows "${CVT_ROWS:-1}"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site_base \
  .whl/*.whl .annawhl_base/*.whl || echo "base wheels did not install"
for v in base new; do
  site=/tmp/site; [ "$v" = base ] && site=/tmp/site_base
  step "wq_int4_$v" "${T_MICRO:-110}" env PYTHONPATH="$site" ANNA_WQ_INT4_PAIRED=1 python3 tools/gpu_experiments/wq_gemv_bench.py \
    --model Qwen3.5-9B --rows 1 --schemes int4
done
echo "== done $(date +%T)"
