set -u
# Twenty-third session: the first call on whichever card comes — on an H200 call_s23_0.sh (Gemma 4 batch 1 first,
# issue 23's H200-only item, then the TTS checks), else call_s23_1.sh (the TTS figures, which hold on either card).
if python3 -c "import torch,sys; sys.exit(0 if 'H200' in torch.cuda.get_device_name() else 1)"; then
  bash tools/gpu_experiments/call_s23_0.sh
else
  bash tools/gpu_experiments/call_s23_1.sh
fi
