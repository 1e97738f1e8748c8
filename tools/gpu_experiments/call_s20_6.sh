set -u
# Twentieth session, GPU call 6: TurboQuant decode attention at the 9B shape, combinations of call 5's winning tunings.
timeout "${T_MICRO_TQ:-100}" python3 tools/gpu_experiments/tq_decode_micro.py --quick --combos --budget-s "${TQ_SWEEP_S:-70}" \
  > /dev/null 2> "$OUT/tq_micro_err.log"
echo "tq micro exit $?"; cat "$OUT/tq_decode_micro.log" | cut -c1-200; tail -3 "$OUT/tq_micro_err.log" | cut -c1-300
