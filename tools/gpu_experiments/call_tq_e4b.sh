set -u
# Issue 30, branch tq-e4b: the TurboQuant decode attention at Gemma 4 E4B's shapes and the new ANNA_TURBOQUANT_DECODE
# choices (words-chunked: two column chunks at 256, 32 keys and one stage at 512, auto's choice there now;
# words-chunked-capped: also one stage and 128 registers at 256). At most 415 s, every part bounded:
#   1. the card and its copy bandwidth (copy_bandwidth.sh, <= 60 s);
#   2. tq_decode_micro.py --candidates at the 9B, E4B-global and E4B-sliding shapes, 4 and 3 bits (graph replays, batch
#      32, 4k context; one line per candidate: us, ratio to bf16's op, max|err| against the reference; the best per
#      shape and the projected steps) (<= T_MICRO_TQ = 140 s, no candidate started after TQ_BUDGET_S = 105 s; the
#      Triton cache it fills serves the steps below);
#   3. the Qwen3.5-9B decode step, bf16 then 4 and 3 bits with words-chunked and words-capped (<= T_STEP9 = 120 s);
#   4. the Gemma 4 E4B decode step, bf16 then 4 bits with auto (words-capped sliding + words-chunked global),
#      words-chunked-capped, then spread (the former 2.6x) while time lasts (<= T_STEP_E4B = 95 s).
# Look for: E4B-global's auto line against spread's (the ptxas projection: far fewer instructions at the same
# registers), E4B-sliding's words-chunked-capped against auto's words-capped, and each step's vs_bf16 (target <= 1.25).
# Run: MODE=script SCRIPT=tools/gpu_experiments/call_tq_e4b.sh bash anna-core/src/anna_core/bench/h200_run.sh
. tools/gpu_experiments/copy_bandwidth.sh
echo "== tq candidates $(date +%T)"
timeout "${T_MICRO_TQ:-140}" python3 tools/gpu_experiments/tq_decode_micro.py --candidates --budget-s "${TQ_BUDGET_S:-105}" \
  --shapes "${TQ_SHAPES:-E4B-global,E4B-sliding,9B}" > /dev/null 2> "$OUT/tq_micro_err.log"
echo "tq candidates exit $? $(date +%T)"; cut -c1-240 "$OUT/tq_decode_micro.log" 2>/dev/null
tail -5 "$OUT/tq_micro_err.log" | cut -c1-300
echo "== 9B step $(date +%T)"
timeout "${T_STEP9:-120}" python3 tools/gpu_experiments/turboquant_bench.py --shapes Qwen3.5-9B --budget-gib 8 --context 4096 \
  --batch 32 --steps 32 --bits "${TQ_BITS9:-4,3}" --tq-decodes "${TQ_DECODES9:-words-chunked,words-capped}" --no-capacity \
  > "$OUT/tq_step9.log" 2>&1
echo "turboquant_bench 9B exit $? $(date +%T)"; grep '^{' "$OUT/tq_step9.log"
grep -iE "error" "$OUT/tq_step9.log" | cut -c1-300 | sort | uniq -c | head -5
echo "== E4B step $(date +%T)"
timeout "${T_STEP_E4B:-95}" python3 tools/gpu_experiments/turboquant_bench.py --shapes gemma-4-E4B-it --budget-gib 8 \
  --context 4096 --batch 32 --steps 32 --bits 4 --tq-decodes "${TQ_DECODES_E4B:-auto,words-chunked-capped,spread}" \
  --no-capacity > "$OUT/tq_step_e4b.log" 2>&1
echo "turboquant_bench E4B exit $? $(date +%T)"; grep '^{' "$OUT/tq_step_e4b.log"
grep -iE "error" "$OUT/tq_step_e4b.log" | cut -c1-300 | sort | uniq -c | head -5
echo "== done $(date +%T)"
