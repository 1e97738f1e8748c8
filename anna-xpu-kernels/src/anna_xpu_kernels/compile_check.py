"""Compile every Triton kernel of this package for an NVIDIA target without a GPU (ahead of time).

The CPU tests run the kernels under Triton's interpreter, which accepts some programs the compiler
rejects (and vice versa). This check lowers representative specialisations of each kernel through
Triton's real pipeline down to a cubin with the bundled ``ptxas`` (default target ``sm_90``,
the H100/H200), so a kernel that would fail to compile on the GPU fails here first.

    python -m anna_xpu_kernels.compile_check [--arch 90]

Must run in a process without ``TRITON_INTERPRET`` / ``ANNA_TRITON_INTERPRET`` (the kernels would be
interpreted functions). Prints one line per compiled kernel; exits non-zero on the first failure.
"""

from __future__ import annotations

import argparse
import re
import sys

from anna_xpu_kernels.compile_cases import cases, signature, turboquant_decode_cases, turboquant_support_cases


def register_usage(arch: int = 90) -> list[tuple[str, int, int]]:
    """``(case name, registers per thread, spill store bytes)`` of :func:`turboquant_decode_cases` and
    :func:`turboquant_support_cases`, compiled for
    ``sm_<arch>`` and assembled by Triton's bundled ``ptxas -v`` (the numbers a GPU reports as ``n_regs`` /
    ``n_spills``, without one).

    Raises:
        RuntimeError: interpreted kernels, or ptxas printed no usage line.
    """
    import subprocess
    import tempfile

    from anna_xpu_kernels._triton import INTERPRETING, triton

    if INTERPRETING:
        raise RuntimeError("register_usage needs a process without TRITON_INTERPRET / ANNA_TRITON_INTERPRET")
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import get_ptxas
    from triton.compiler import ASTSource

    cases = [(fn, act, c, warps, options, {}, f"_tq_attention_kernel {name}")
             for fn, act, c, warps, options, name in turboquant_decode_cases()]
    cases += [(fn, act, c, warps, {}, ptrs, f"{fn.__name__} {name}")
              for fn, act, c, warps, ptrs, name in turboquant_support_cases()]
    out = []
    for fn, act, constexprs, num_warps, options, ptr_types, name in cases:
        src = ASTSource(fn, {**signature(fn, act, constexprs), **ptr_types}, constexprs=constexprs)
        compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": num_warps, **options})
        with tempfile.TemporaryDirectory() as tmp:
            ptx = f"{tmp}/kernel.ptx"
            with open(ptx, "w") as f:
                f.write(compiled.asm["ptx"])
            log = subprocess.run([get_ptxas(arch).path, "-v", f"--gpu-name=sm_{arch}a", ptx, "-o", f"{tmp}/k.cubin"],
                                 capture_output=True, text=True, check=True).stderr
        regs = re.search(r"Used (\d+) registers", log)
        spills = re.search(r"(\d+) bytes spill stores", log)
        if regs is None or spills is None:
            raise RuntimeError(f"ptxas printed no register usage for {name}: {log[-500:]}")
        out.append((name, int(regs.group(1)), int(spills.group(1))))
    return out


def _largest_loop(sass: str) -> list[str]:
    """The instructions of the longest loop (a label up to a branch back to it) of an ``nvdisasm -c`` listing."""
    instrs, labels, best = [], {}, []
    for line in sass.splitlines():
        label = re.match(r"\s*(\.L_x_\d+):", line)
        if label:
            labels[label.group(1)] = len(instrs)
            continue
        ins = re.match(r"\s*/\*[0-9a-f]+\*/\s+(.*?)\s*;", line)
        if ins:
            instrs.append(ins.group(1))
            back = re.search(r"BRA\s.*?(\.L_x_\d+)", ins.group(1))
            if back and labels.get(back.group(1), len(instrs)) < len(instrs):
                body = instrs[labels[back.group(1)]:]
                best = body if len(body) > len(best) else best
    return best


def loop_instructions(arch: int = 90) -> list[tuple[str, int, int, int, dict[str, int]]]:
    """``(case name, SASS instructions of the key loop per thread, keys per iteration, warps, the ten commonest
    opcodes)``
    of :func:`turboquant_decode_cases`, compiled for ``sm_<arch>`` and disassembled by Triton's bundled
    ``nvdisasm``: a static measure of the decode attention's work per key (no GPU needed; shuffles, shared-memory
    and conversion instructions issue slower than integer ones, so it ranks variants, not times).

    Raises:
        RuntimeError: interpreted kernels.
    """
    import collections
    import os
    import subprocess
    import tempfile

    from anna_xpu_kernels._triton import INTERPRETING, triton

    if INTERPRETING:
        raise RuntimeError("loop_instructions needs a process without TRITON_INTERPRET / ANNA_TRITON_INTERPRET")
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import get_ptxas
    from triton.compiler import ASTSource

    nvdisasm = os.path.join(os.path.dirname(get_ptxas(arch).path), "nvdisasm")
    out = []
    for fn, act, constexprs, num_warps, options, name in turboquant_decode_cases():
        src = ASTSource(fn, signature(fn, act, constexprs), constexprs=constexprs)
        compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": num_warps, **options})
        with tempfile.TemporaryDirectory() as tmp:
            with open(f"{tmp}/k.cubin", "wb") as f:
                f.write(compiled.asm["cubin"])
            sass = subprocess.run([nvdisasm, "-c", f"{tmp}/k.cubin"], capture_output=True, text=True,
                                  check=True).stdout
        body = _largest_loop(sass)
        ops = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", i).split()[0].split(".")[0] for i in body)
        out.append((name, len(body), constexprs["BLOCK_N"], num_warps, dict(ops.most_common(10))))
    return out


_GLOBAL_WRITES = ("st.global", "atom.global", "red.global")
_PRELOADS = {
    "_gemv_kernel": r"ld\.global\.L1::evict_first",  # the prefetched weight tiles (the only evict-first loads)
    "_persistent_gemv_kernel": r"ld\.global\.L1::evict_(first|last)",  # the first weight block; post-norm weights
    "_long_gemv_kernel": r"ld\.global\.L1::evict_first",  # the first weight tile
    "_wq_decode_kernel": r"ld\.global\.L1::evict_(first|last)",  # the first tile's codes and scales
    "_fused_gdn_decode_kernel": r"ld\.global\.b(32|64)\b",  # the slot (int64), the float32 state
    "_gated_block_kernel": r"ld\.global\.L1::evict_(first|last)",  # the first gate tile; the post norm, layer scale
    "_per_layer_inputs_kernel": r"ld\.global\.L1::evict_last",  # the norm's weight
    # the norms' weights (anna_xpu_kernels.norm_tiles.norm_weight: the only evict-last loads)
    **{name: r"ld\.global\.L1::evict_last" for name in (
        "_rms_norm_kernel", "_add_rms_norm_kernel", "_post_norm_residual_kernel", "_dual_post_norm_residual_kernel",
        "_rms_norm_pair_kernel", "_post_norm_residual_norm_pair_kernel")},
}
"""Global loads a kernel may issue before ``griddepcontrol.wait`` (a regex each must match); none for the
others. The GDN pattern tells the state apart from bf16 activations, not from float32 ones."""


def check_pdl_order(ptx: str, preload: str | None = None) -> None:
    """The PDL contract visible in a kernel's PTX (:mod:`anna_xpu_kernels.pdl`): it signals its
    dependents and waits (``griddepcontrol``), no global store or atomic precedes the first wait, and
    every global load before it matches ``preload`` (None: no load may come first).

    Raises:
        RuntimeError: a griddepcontrol instruction is missing, or a global write or an unexpected
            global load comes before the wait.
    """
    wait = ptx.find("griddepcontrol.wait")
    if wait < 0 or "griddepcontrol.launch_dependents" not in ptx:
        raise RuntimeError("a USE_PDL kernel lacks griddepcontrol.wait / launch_dependents")
    early = [w for w in _GLOBAL_WRITES if w in ptx[:wait]]
    if early:
        raise RuntimeError(f"{early} before griddepcontrol.wait: the kernel writes before its predecessor completed")
    loads = re.findall(r"ld\.global[.\w:]*", ptx[:wait])
    stray = sorted({ld for ld in loads if preload is None or not re.match(preload, ld)})
    if stray:
        raise RuntimeError(f"{stray} before griddepcontrol.wait: the kernel may read its predecessor's output early")


def compile_all(arch: int = 90) -> list[str]:
    """Compile every case for ``cuda:sm_<arch>``; return one description line per kernel.

    Raises:
        RuntimeError: the kernels were imported under the interpreter.
        triton.CompilationError (or ptxas errors): a kernel does not compile.
    """
    from anna_xpu_kernels._triton import INTERPRETING, triton

    if INTERPRETING:
        raise RuntimeError("compile_check needs a process without TRITON_INTERPRET / ANNA_TRITON_INTERPRET")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    lines = []
    for kernel, act, constexprs, num_warps, *ptr_types in cases():  # ptr_types: a case's own pointer types
        fn = kernel
        while not isinstance(fn, triton.runtime.jit.JITFunction):  # unwrap @autotune
            fn = fn.fn
        src = ASTSource(fn, {**signature(fn, act, constexprs), **(ptr_types[0] if ptr_types else {})},
                        constexprs=constexprs)
        compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": num_warps})
        shown = {k: v for k, v in constexprs.items()
                 if k.startswith("BLOCK") or k == "NUM_SPLITS" or (k in ("NATIVE_FP8", "PAIR_INT4") and v)}
        if constexprs.get("USE_PDL"):
            check_pdl_order(compiled.asm["ptx"], _PRELOADS.get(fn.__name__))
            shown["pdl"] = "waits first"
        lines.append(f"{fn.__name__} {act} {shown}: ok, {compiled.metadata.shared} B shared memory")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m anna_xpu_kernels.compile_check", description=__doc__.split("\n")[0])
    parser.add_argument("--arch", type=int, default=90, help="CUDA compute capability, e.g. 90 (H100/H200), 80 (A100)")
    parser.add_argument("--registers", action="store_true",
                        help="print the TurboQuant kernels' registers and spill stores instead")
    parser.add_argument("--sass", action="store_true",
                        help="print the SASS instructions of the TurboQuant decode attention's key loop instead")
    args = parser.parse_args(argv)
    if args.sass:
        for name, n, keys, warps, ops in loop_instructions(args.arch):  # warp instructions per key: comparable
            # across warps and tile widths (a thread's count halves with twice the warps)
            print(f"{name}: {n} instructions per thread per {keys} keys, {warps} warps: "
                  f"{n * warps / keys:.0f} warp instructions per key; {ops}")
        return 0
    if args.registers:
        for name, regs, spills in register_usage(args.arch):
            print(f"{name}: {regs} registers, {spills} bytes spill stores")
        return 0
    for line in compile_all(args.arch):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
