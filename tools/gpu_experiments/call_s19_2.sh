set -u
# Nineteenth session, GPU call 2 (BENCHMARKS.md): the Gemma 4 A/B of main against main + gemma-fuse + gpu-quant, then --weight-quant runs at 9B and the wq GEMV microbenchmark. Through h200_run.sh MODE=script.
S=tools/gpu_experiments
python3 -c "import av" 2>&1 | tail -1; python3 -c "import PIL; print('PIL', PIL.__version__)"
echo "== gemma A/B $(date +%T)"
RUNS="E2B:1:2048:128 E4B:1:2048:128" NEW_FLAGS=--timeline T_RUN=150 timeout 260 bash $S/wheels_ab_bench.sh 2>&1 | cut -c1-1500
echo "== wq $(date +%T)"
export PYTHONPATH=/tmp/site_new PATH=/tmp/site_new/bin:$PATH
NRUNS=1 T_RUN=100 RUNS="Qwen3.5-9B:1:512:128 Qwen3.5-9B:1:512:128:weight-quant=int4 Qwen3.5-9B:1:512:128:weight-quant=fp8 Qwen3.5-9B:1:512:128:weight-quant=int8 Qwen3.5-9B:32:512:128:weight-quant=int4" \
  timeout 280 bash $S/gemma4_bench.sh 2>&1 | grep -v "^kernels" | cut -c1-700
echo "== wq micro $(date +%T)"
timeout 50 python3 $S/wq_gemv_bench.py --rows 1 2>&1 | tail -25
echo "== end $(date +%T)"
