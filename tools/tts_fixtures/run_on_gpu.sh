#!/usr/bin/env bash
# Regenerates the Qwen3-TTS golden fixtures on the GPU machine, whose image holds what the reference package
# imports except the wheels carried in .whl_tts/ (qwen-tts-hf, librosa, soundfile + cffi + pycparser, soxr,
# sox, audioread, decorator, pooch, platformdirs; see tools/tts_fixtures/README.md). Run from the repository root:
#
#   run(command="bash tools/tts_fixtures/run_on_gpu.sh", carry=[".whl_tts"], timeout_s=600)
#
# It builds the tiny checkpoints and runs the reference on the CPU (the committed fixtures' device), then again on
# CUDA when a GPU is there, compares both with the committed fixtures, and leaves in $OUT:
#   qwen3_tts_fixtures.tgz       the CPU fixtures folder (checkpoints + golden/), to unpack over
#                                tests/audio/fixtures/qwen3_tts/ if they should replace the committed ones
#   compare_cpu.txt, compare_cuda.txt, log.txt
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-/tmp/tts_out}"
mkdir -p "$out"
exec > >(tee "$out/log.txt") 2>&1

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/tts .whl_tts/*.whl || exit 1
export PYTHONPATH=/tmp/tts HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
python3 -c "import torch, torchaudio, transformers, onnxruntime; print('torch', torch.__version__, 'torchaudio', torchaudio.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())"

script=tools/tts_fixtures/make_qwen3_tts_fixtures.py
python3 "$script" --out /tmp/qwen3_tts_fixtures --device cpu \
    --note "GPU machine image, reference on the CPU" || exit 1
python3 tools/tts_fixtures/compare_fixtures.py tests/audio/fixtures/qwen3_tts /tmp/qwen3_tts_fixtures | tee "$out/compare_cpu.txt"
tar -C /tmp -czf "$out/qwen3_tts_fixtures.tgz" qwen3_tts_fixtures

if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    mkdir -p /tmp/qwen3_tts_cuda
    cp -r /tmp/qwen3_tts_fixtures/tiny-* /tmp/qwen3_tts_cuda/
    python3 "$script" --out /tmp/qwen3_tts_cuda --device cuda --reuse-checkpoints \
        --note "GPU machine image, reference on CUDA" \
        && python3 tools/tts_fixtures/compare_fixtures.py /tmp/qwen3_tts_fixtures /tmp/qwen3_tts_cuda | tee "$out/compare_cuda.txt"
fi
exit 0
