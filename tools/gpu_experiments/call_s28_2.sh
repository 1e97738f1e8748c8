set -u
# Twenty-eighth session, third GPU call (about 200 s warm): issue 30's 9B batch-32 4k decode step on the card at hand,
# bf16 and 4 bits with the `chain` and the `columns` cache writes (columns measured faster on an H100 in the
# twenty-seventh session; `auto` still takes chain). Issue 27's figures: call_s27_3.sh (defaults, then the norm
# prologue forced on), run before this one on the same machine.
#   MODE=script SCRIPT=tools/gpu_experiments/call_s28_2.sh bash anna-core/src/anna_core/bench/h200_run.sh
. tools/gpu_experiments/copy_bandwidth.sh
. tools/gpu_experiments/tq_step9.sh
echo "== done $(date +%T)"
