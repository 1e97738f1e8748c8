set -u
# Twenty-second session, one call for the measurements that hold on either card (H100 or H200), each part bounded so
# the whole stays under ~540 s after install: issue 27's speech benchmark with today's overlap (1.7B shape, 125
# frames, 1 and 16 concurrent; no reference), issue 30's TurboQuant step at 9B (batch 32, 4k context, 8 GiB pool),
# issue 29's 9B batch-1 decode bf16 vs --weight-quant int4 (LM head int4), then on an H200 only issue 23's Gemma 4
# E2B / E4B batch-1 decode. Through h200_run.sh.
. tools/gpu_experiments/copy_bandwidth.sh
echo "== tts $(date +%T)"
REF=0 T_TTS=${T_TTS:-150} bash tools/gpu_experiments/tts_bench.sh
echo "== turboquant $(date +%T)"
timeout "${T_BENCH:-80}" python3 tools/gpu_experiments/turboquant_bench.py --shapes "${SHAPES:-Qwen3.5-9B}" \
  --budget-gib 8 --context 4096 --batch 32 --steps 32 > "$OUT/tq.log" 2>&1
echo "turboquant_bench exit $? $(date +%T)"; grep '^{' "$OUT/tq.log" | cut -c1-900
grep -iE "error" "$OUT/tq.log" | cut -c1-300 | sort | uniq -c | head -5
echo "== weight quant $(date +%T)"
B=Qwen3.5-9B:1:512:128
NRUNS=1 T_RUN=${T_WQ:-85} RUNS="${RUNS_WQ:-$B $B:weight-quant=int4:lm-head-quant=int4}" \
  bash tools/gpu_experiments/gemma4_bench.sh 2>&1 | grep -v "^kernels" | cut -c1-700
if python3 -c "import torch,sys; sys.exit(0 if 'H200' in torch.cuda.get_device_name() else 1)"; then
  echo "== gemma (H200) $(date +%T)"
  NRUNS=1 T_RUN=${T_G:-75} RUNS="E2B:1:2048:128 E4B:1:2048:128" \
    bash tools/gpu_experiments/gemma4_bench.sh 2>&1 | grep -v "^kernels" | cut -c1-700
fi
echo "== done $(date +%T)"
