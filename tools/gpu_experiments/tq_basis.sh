# Issue 30's TurboQuant changes of basis, old row-parallel launches against the new row x column ones, sourced by
# the call scripts (`. tools/gpu_experiments/tq_basis.sh`) or run alone from the repository root with the wheels
# installed (`OUT=... bash tools/gpu_experiments/tq_basis.sh`): tq_basis_micro.py at the 9B / E4B global / E4B
# sliding shapes, batch 32 and 1, bounded by T_TQ_BASIS seconds (default 110). The table in $OUT/tq_basis_micro.log.
echo "== tq basis $(date +%T)"
timeout "${T_TQ_BASIS:-110}" python3 tools/gpu_experiments/tq_basis_micro.py > /dev/null 2> "$OUT/tq_basis_err.log"
echo "tq basis exit $? $(date +%T)"; cut -c1-200 "$OUT/tq_basis_micro.log" 2>/dev/null
tail -5 "$OUT/tq_basis_err.log" | cut -c1-300
