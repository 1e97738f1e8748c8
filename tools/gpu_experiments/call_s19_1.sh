set -u
# Nineteenth session, GPU call 1 (BENCHMARKS.md): the kernel conformance suite on CUDA, then gemma4_bench.sh over RUNS. Through h200_run.sh MODE=script.
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
echo "== conformance $(date +%T)"
timeout 150 python3 -m pytest -q -p no:cacheprovider -x tools/gpu_experiments/test_kernel_conformance_cuda.py 2>&1 | tail -15
echo "== gemma $(date +%T)"
NRUNS=1 T_RUN=140 RUNS="${RUNS}" bash tools/gpu_experiments/gemma4_bench.sh 2>&1 | grep -v "^kernels" | cut -c1-900
echo "== end $(date +%T)"
