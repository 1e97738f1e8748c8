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
    rows = [line.split() for line in experts.splitlines()[3:]]
    triton_rows = [r for r in rows if "triton" in r]
    assert len(triton_rows) == 4 and not any("failed:" in " ".join(r) for r in rows)  # 2 shapes x 2 token counts
    for r in triton_rows:
        assert float(r[r.index("triton") + 4]) < 1e-4, r  # "<abs> (rel <rel>)" after us, GB/s, TFLOP/s
    rows = [line.split() for line in router.splitlines()[3:]]
    assert len(rows) == 12 and not any("failed:" in " ".join(r) for r in rows)  # x 3 implementations
    for r in rows:
        if "triton" in r or "reference" in r:  # the same experts, weights to rounding
            assert r[-2] == "0" and float(r[-1]) < 1e-6, r
