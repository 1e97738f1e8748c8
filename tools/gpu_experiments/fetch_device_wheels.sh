#!/usr/bin/env bash
# The third-party wheels the GPU machine lacks (its image has torch, triton, transformers, safetensors, tokenizers,
# numpy, pillow, jinja2, pyyaml, tqdm, huggingface_hub), downloaded here into .whl/ for h200_run.sh to install there
# with --no-deps: Anna's runtime dependencies (gguf, pluggy, attrs, litestar and its own, prometheus-client,
# fla-core, click, uvicorn, soundfile, soxr, ...). 9 MB; xgrammar (structured output) and PyAV are left out to keep
# the carry under the device tool's 64 MiB (add them by name for a run that needs them). Run from the repo root:
#   bash tools/gpu_experiments/fetch_device_wheels.sh
set -euo pipefail
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo '/.whl/' >> .git/info/exclude; }
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any -d .whl \
  gguf pluggy attrs fla-core==0.6.0 einops litestar litestar-htmx msgspec multidict multipart polyfactory faker \
  rich-click rich markdown-it-py mdurl pygments anyio sniffio httpx httpcore certifi idna h11 click uvicorn \
  prometheus-client soundfile cffi pycparser soxr
ls .whl
