set -u
# Twenty-third session, second GPU call: issue 27's speech figures at the 1.7B shape (random weights, bf16, 125
# frames): tts_bench at 1 and 16 concurrent with the reference (qwen_tts) in the same process when .whl_tts is
# carried, then the first audio with the talker's prefill graphs on and off (tts_first_audio.sh without its check).
# Under ~540 s.
. tools/gpu_experiments/copy_bandwidth.sh
echo "== tts $(date +%T)"
T_TTS=${T_TTS:-290} bash tools/gpu_experiments/tts_bench.sh
echo "== first audio $(date +%T)"
T_CHECK=1 T_RUN=${T_FA:-75} RUNS=3 bash tools/gpu_experiments/tts_first_audio.sh 2>&1 | grep -v "tts_prefill_check"
echo "== done $(date +%T)"
