"""The TurboQuant decode attention compiles without register spills at its default launch settings (sm_90, the
H100 / H200, compiled and assembled by Triton's own ptxas, no GPU needed): the Qwen3.5-9B shape and Gemma 4's
512-wide global layers, whose one-chunk kernel spilled (96 bytes of spill stores per thread)."""

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
    lines = out.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["_tq_attention_kernel 9B", "_tq_attention_kernel E4B-global"]
    for line in lines:
        regs = int(line.split(": ")[1].split()[0])
        assert 0 < regs <= 255 and line.endswith(" 0 bytes spill stores"), line
