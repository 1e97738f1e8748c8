"""The TurboQuant decode attention compiles without register spills at its default launch settings (sm_90, the
H100 / H200, compiled and assembled by Triton's own ptxas, no GPU needed): the Qwen3.5-9B shape and Gemma 4's
512-wide global layers (whose one-chunk kernel spilled 96 bytes per thread), 4 and 3 bits; 2 bits and a residual
ring compile (the ring's tail loop may spill)."""

import os
import subprocess
import sys

import pytest

from tests.xpu_kernels._interp import require_triton_interpreter

require_triton_interpreter()


def test_decode_defaults_do_not_spill_registers(tmp_path):
    from triton.backends import backends

    if "nvidia" not in backends:
        pytest.skip("triton has no NVIDIA backend here")
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "ANNA_TRITON_INTERPRET")}
    env["TRITON_CACHE_DIR"] = str(tmp_path)
    out = subprocess.run([sys.executable, "-m", "anna_xpu_kernels.compile_check", "--registers"], check=False,
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    usage = {line.split(": ")[0].removeprefix("_tq_attention_kernel "): line.split(": ")[1]
             for line in out.stdout.splitlines()}
    assert sorted(usage) == ["9B 2-bit", "9B 3-bit", "9B 4-bit", "E4B-global 3-bit", "E4B-global 4-bit",
                             "E4B-global 4-bit ring"]  # all compile (the shuffle lookup failed at 2 bits)
    for name in ("9B 4-bit", "9B 3-bit", "E4B-global 4-bit", "E4B-global 3-bit"):
        regs = int(usage[name].split()[0])
        assert 0 < regs <= 255 and usage[name].endswith(" 0 bytes spill stores"), (name, usage[name])
