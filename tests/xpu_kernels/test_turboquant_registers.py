"""The TurboQuant decode attention compiles without register spills at its default launch settings (sm_90, the
H100 / H200, compiled and assembled by Triton's own ptxas, no GPU needed): the Qwen3.5-9B shape, Gemma 4 E4B's
512-wide global layers (whose one-chunk kernel spilled 96 bytes per thread) and its windowed sliding layers, 4 and 3
bits, with the ``spread``, ``words`` and ``words-chunked`` decodes (``auto`` takes ``words-chunked`` at 512); at 256
``words-capped`` (at most 128 registers), and ``words-chunked-capped`` at E4B's sliding shape (it spills a few bytes
at the 9B's: a candidate for timing there, not a default); 2 bits and a residual ring compile (the ring's tail loop
may spill); the query projections and the merge (8 and 64 splits) with the rotation back at 512 at every column
chunk width, and the cache write at 512 (and its columns launch at 256 and 512) do not spill either."""

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
    usage = dict(line.split(": ") for line in out.stdout.splitlines())
    main = ["9B 4-bit", "9B 3-bit", "E4B-global 4-bit", "E4B-global 3-bit", "E4B-sliding 4-bit"]
    at_256 = [n for n in main if "global" not in n]
    # and the words decodes (ANNA_TURBOQUANT_DECODE), capped at 128 registers at 256 (words-capped)
    attention = main + [f"{n} {c}" for n in main for c in ("words", "words-chunked")] + [
        f"{n} words-capped" for n in at_256] + ["E4B-sliding 4-bit words-chunked-capped"]
    support = [f"_tq_query_kernel query projections {w}" for w in (64, 32, 16)] + [
        f"_tq_output_kernel merge {s} splits and rotation back {w}" for w in (64, 32, 16) for s in (8, 64)] + [
               "_tq_write_kernel cache write", "_tq_write_columns_kernel cache write columns 256",
               "_tq_write_columns_kernel cache write columns 512"]
    # all compile (the shuffle lookup failed at 2 bits); the ring's tail loop and words-chunked-capped at the 9B
    # shape may spill
    others = [f"{n}{c}" for n in ("9B 2-bit", "E4B-global 4-bit ring") for c in ("", " words", " words-chunked")] + [
        "9B 2-bit words-capped"] + [f"9B {b}-bit words-chunked-capped" for b in (4, 3, 2)]
    assert sorted(usage) == sorted([f"_tq_attention_kernel {n}" for n in (*attention, *others)] + support)
    for name in [f"_tq_attention_kernel {n}" for n in attention] + support:
        regs = int(usage[name].split()[0])
        assert 0 < regs <= 255 and usage[name].endswith(" 0 bytes spill stores"), (name, usage[name])
    for name in [n for n in usage if n.endswith("-capped")]:  # four 4-warp programs per multiprocessor
        assert int(usage[name].split()[0]) <= 128, (name, usage[name])
