#!/usr/bin/env bash
# Build llama-cpp-python from its sdist into a cached wheel OUTSIDE the repository, for the CPU benchmark's
# optional llama.cpp side by side (python -m anna_core.bench.gguf_cpu --llama-cpp). Never a dependency of
# Anna and never run in CI: run it by hand, on a quiet machine (6-9 minutes on 2 cores).
#
#   bash tools/build_llama_cpp.sh            # build (once) and install the cached wheel into .venv
#   ANNA_LLAMA_CPP_INSTALL=0 bash tools/build_llama_cpp.sh   # build only
#
#   ANNA_VENV=path              the virtualenv to install into (default: .venv in the checkout)
#   ANNA_LLAMA_CPP_VERSION=x.y  llama-cpp-python version (default 0.3.36, the one issue 28 measured)
#   ANNA_LLAMA_CPP_WHEELS=dir   wheel cache (default: $ANNA_CACHE_DIR/wheels, else ~/.cache/anna/wheels)
#
# The default build compiles for the build machine's own instruction set (GGML_NATIVE) and dies with an
# illegal instruction on these machines, so the ISA is fixed: AVX2 + FMA + F16C, no AVX-512, no AMX.
# A wheel already in the cache is reused; delete it to rebuild.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${ANNA_VENV:-.venv}"
version="${ANNA_LLAMA_CPP_VERSION:-0.3.36}"
wheels="${ANNA_LLAMA_CPP_WHEELS:-${ANNA_CACHE_DIR:-$HOME/.cache/anna}/wheels}"
case "$(cd "$(dirname "$wheels")" 2>/dev/null && pwd)/" in
  "$PWD"/*) echo "error: the wheel cache must be outside the repository ($wheels)" >&2; exit 2 ;;
esac
mkdir -p "$wheels"
python="$venv/bin/python"
[ -x "$python" ] || { echo "error: no virtualenv at $venv (run tools/install.sh first)" >&2; exit 2; }

# ls -t: the newest cached wheel of this version
wheel="$(ls -t "$wheels"/llama_cpp_python-"$version"-*.whl 2>/dev/null | head -n 1 || true)"
if [ -z "$wheel" ]; then
  export CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
  export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
  echo "building llama-cpp-python $version from its sdist (CMAKE_ARGS=$CMAKE_ARGS) into $wheels" >&2
  start=$(date +%s)
  # --no-binary: the sdist, compiled here with the flags above; --no-deps: its runtime dependencies
  # (numpy, typing-extensions, jinja2) are in Anna's environment already, diskcache is installed below
  "$python" -m pip wheel --no-deps --no-binary llama-cpp-python --disable-pip-version-check \
    -w "$wheels" "llama-cpp-python==$version"
  echo "built in $(( $(date +%s) - start )) s" >&2
  wheel="$(ls -t "$wheels"/llama_cpp_python-"$version"-*.whl | head -n 1)"
fi
echo "wheel: $wheel" >&2
if [ "${ANNA_LLAMA_CPP_INSTALL:-1}" = "1" ]; then
  "$python" -m pip install -q --no-deps --disable-pip-version-check --force-reinstall "$wheel"
  "$python" -m pip install -q --disable-pip-version-check diskcache  # llama_cpp imports it at import time
  "$python" -c "import llama_cpp; print('llama_cpp', llama_cpp.__version__, 'installed in', '$venv')"
fi
