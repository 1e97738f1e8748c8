"""The GPU microbenchmark script runs end to end on tiny shapes under the interpreter (GPU time is scarce)."""

import os
import subprocess
import sys

from tests.xpu_kernels._interp import require_triton_interpreter, run_microbench_smoke

require_triton_interpreter()


def test_microbench_smoke_on_cpu():
    out = run_microbench_smoke("--batch-sizes", "1", "--dtype", "float32", "--only", "ops")
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [line.split() for line in out.stdout.splitlines()[3:]]
    triton_rows = [r for r in rows if "triton" in r]
    assert len(triton_rows) == 15 and not any("failed:" in " ".join(r) for r in rows)
    # float32 outputs agree with the reference to rounding: "out <abs> (rel <rel>)".
    for r in triton_rows:
        assert float(r[r.index("out") + 1]) < 1e-4, r


def test_microbench_refuses_cpu_without_the_interpreter():
    env = {k: v for k, v in os.environ.items() if k != "ANNA_TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-m", "anna_xpu_kernels.microbench", "--device", "cpu"],
                         check=False, capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 2 and "ANNA_TRITON_INTERPRET=1" in out.stderr


def test_microbench_moe_smoke_on_cpu():
    out = run_microbench_smoke("--dtype", "float32", "--only", "moe")
    assert out.returncode == 0, out.stderr[-3000:]
    experts, router = out.stdout.split("# moe_route on ")
    assert experts.startswith("# moe_experts on ")
    lines = experts.splitlines()
    assert lines[1].startswith("# roofline: ") and "not measured" in lines[1]
    rows = [line.split() for line in lines[4:]]
    assert not any("failed:" in " ".join(r) for r in rows)
    # 2 shapes x 3 token counts (1, 2, 5): the op as dispatched, the grouped path forced, and up to 4
    # tokens the decode path forced; the dispatched path: decode at T = 1 only (E = 8 or 6 shares experts)
    impls = [(r[0], r[2], r[3], r[4]) for r in rows if r[3] != "reference"]
    assert len(impls) == 2 * (3 + 3 + 2)
    assert {(m, t, p) for m, t, i, p in impls if i == "triton"} == {
        (m, t, "decode" if t == "1" else "grouped") for m in ("smoke-silu", "smoke-gelu") for t in ("1", "2", "5")}
    assert {(m, t) for m, t, i, _ in impls if i == "triton-decode"} == {
        (m, t) for m in ("smoke-silu", "smoke-gelu") for t in ("1", "2")}
    for r in rows:
        if r[3] != "reference":  # "<abs> (rel <rel>)" after path, us, GB/s, roofline %, TFLOP/s
            assert float(r[r.index(r[3]) + 6]) < 1e-4, r
    rows = [line.split() for line in router.splitlines()[3:]]
    assert len(rows) == 18 and not any("failed:" in " ".join(r) for r in rows)  # 2 x 3 token counts x 3 impls
    for r in rows:
        if "triton" in r or "reference" in r:  # the same experts, weights to rounding
            assert r[-2] == "0" and float(r[-1]) < 1e-6, r
