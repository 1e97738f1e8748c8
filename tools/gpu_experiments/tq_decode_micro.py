"""TurboQuant decode attention against bf16 paged attention at the issue-30 decode shapes (batch 32, 4k context),
one layer's op at a time, each captured in a CUDA graph (as the engine's decode step runs it).

Run from the repository root on a CUDA machine (PYTHONPATH set to the packages' src folders, or the wheels
installed)::

    timeout 200 python3 tools/gpu_experiments/tq_decode_micro.py --budget-s 120 [--quick] [--no-sweep] [--no-write]
        [--shapes 9B,E4B-sliding,E4B-global]

(``--write-only``: just the cache-write line per shape at 4 and 3 bits, ``chain`` against ``columns``.)

(``--cpu-smoke``: the same cases at batch 2 and 64 tokens through Triton's interpreter, wall-clock times, to check
the script itself without a GPU.)

``--candidates`` instead times the decode variants (issue 30's step target): per shape bf16, then each
``ANNA_TURBOQUANT_DECODE`` choice's settings (``spread``, ``auto``'s, the ``words`` family: the ``words`` unpack with
the ``lane`` shuffle, anna_xpu_kernels.turboquant_codes; explicit tunings, whatever the environment says) and launch
variations, 4 and 3-bit QJL keys (3 bits: the choices only), one line each (us, ratio to bf16, max|err| against the
reference), the 9B 4-bit cache write, the best per shape and each model's projected step with it.

Shapes: Qwen3.5-9B full attention (16 q / 4 kv heads, head dim 256, 8 such layers), Gemma 4 E4B sliding layers
(8 q / 2 kv, 256, window 512, 35 layers) and global layers (8 q / 2 kv, 512, 7 layers); block size 16, every
sequence's 256 blocks a random permutation of the pool (the engine's tables are arbitrary block ids).

Prints one line per case: the op's median us per call (CUDA-event timing of graph replays), its ratio to bf16's at
that shape, and max |err| of the first two sequences' outputs against the torch reference (TurboQuant) or the
bf16 reference; per shape and bits (QJL keys) one decode step's cache write: bf16 ``index_copy_``, the one-launch
TurboQuant write (:mod:`anna_xpu_kernels.turboquant_write`: ``chain``, then ``columns`` at three settings) and the
torch reference's composition; then the
projected decode step per model from this morning's measured bf16 steps (H100: 9B 9.18 ms, E4B 7.33 ms) plus the
per-layer differences, against the issue's target (at most 1.25x bf16); then ``n_regs`` / ``n_spills`` of every
compiled TurboQuant and paged-attention kernel (lines ``regs ...``). After the defaults, a sweep of
:class:`anna_xpu_kernels.turboquant.TurboQuantTuning` variants and split counts at the 9B 4-bit and the E4B global
4-bit shapes (there: the old one-chunk default for comparison), while the time allows (stops starting variants
after ``--budget-s``). Lines are also written to ``$OUT/tq_decode_micro.log`` when ``OUT`` is set.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

BATCH, CTX, BLOCK, DEVICE = 32, 4096, 16, "cuda"
BF16_STEP_MS = {"9B": 9.18, "E4B": 7.33}  # H100, batch 32, 4k context, CUDA graphs (issue 30's measurement)
SHAPES = {  # name: (h_q, h_kv, head_dim, window, layers in the model)
    "9B": (16, 4, 256, None, 8),
    "E4B-sliding": (8, 2, 256, 512, 35),
    "E4B-global": (8, 2, 512, None, 7),
}
_LOG: list[str] = []


def _say(line: str) -> None:
    print(line, flush=True)
    _LOG.append(line)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "tq_decode_micro.log"), "a") as f:
            f.write(line + "\n")


def _graph_us(fn, reps: int = 10, samples: int = 15) -> float:
    """Median us per call of ``fn`` replayed from a CUDA graph (eager timing if the capture fails)."""
    if DEVICE == "cpu":  # the smoke run: one interpreted call, wall clock
        fn()
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e6
    fn()
    torch.cuda.synchronize()
    run = fn
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        run = graph.replay
    except Exception as e:  # noqa: BLE001 (report it and time eagerly)
        _say(f"  (graph capture failed: {type(e).__name__}: {e}; timing eagerly)")
    run()
    torch.cuda.synchronize()
    times = []
    for _ in range(samples):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / reps)
    return statistics.median(times)


class Shape:
    """One attention layer's decode inputs at batch 32 and 4k context (bf16 caches filled with random rows)."""

    def __init__(self, name: str):
        self.name = name
        self.h_q, self.h_kv, self.dim, self.window, self.layers = SHAPES[name]
        dev = DEVICE
        g = torch.Generator(device=dev).manual_seed(0)
        blocks = CTX // BLOCK
        self.n_blocks = BATCH * blocks + 1
        self.tables = torch.randperm(self.n_blocks, device=dev, generator=g)[:BATCH * blocks].view(BATCH, blocks)
        self.tables = self.tables.to(torch.int32)
        shape = (self.n_blocks, BLOCK, self.h_kv, self.dim)
        self.k = torch.randn(shape, device=dev, dtype=torch.bfloat16, generator=g)
        self.v = torch.randn(shape, device=dev, dtype=torch.bfloat16, generator=g)
        self.q = torch.randn(BATCH, self.h_q, self.dim, device=dev, dtype=torch.bfloat16, generator=g)
        self.cu = torch.arange(BATCH + 1, device=dev, dtype=torch.int32)
        self.lens = torch.full((BATCH,), CTX, device=dev, dtype=torch.int32)
        self.scale = self.dim ** -0.5

    def bf16_args(self, n: int = BATCH) -> tuple:
        return (self.q[:n], self.k, self.v, self.cu[:n + 1], self.lens[:n], self.tables[:n], self.scale, self.window)

    def quantized(self, bits: int, key_qjl: bool) -> tuple:
        """``(k_cache, v_cache, tables args)`` holding this shape's rows quantized by the Triton write."""
        from anna_core.kv_quant.layout import TurboQuantLayout
        from anna_core.kv_quant.tables import TurboQuantTables
        from anna_xpu_kernels import turboquant_write as tw

        layout = TurboQuantLayout(bits, key_qjl=key_qjl)
        tables = TurboQuantTables.build(layout, self.dim, DEVICE).args
        kc = torch.zeros(self.n_blocks, BLOCK, self.h_kv, layout.key_row_bytes(self.dim), dtype=torch.uint8,
                         device=DEVICE)
        vc = torch.zeros(self.n_blocks, BLOCK, self.h_kv, layout.value_row_bytes(self.dim), dtype=torch.uint8,
                         device=DEVICE)
        rows = self.n_blocks * BLOCK
        step = 16384
        for s in range(0, rows, step):
            e = min(rows, s + step)
            slots = torch.arange(s, e, device=DEVICE)
            tw.turboquant_cache_write(self.k.view(rows, self.h_kv, self.dim)[s:e],
                                      self.v.view(rows, self.h_kv, self.dim)[s:e], kc, vc, slots, *tables)
        return kc, vc, tables

    def tq_args(self, quant: tuple, n: int = BATCH) -> tuple:
        kc, vc, tables = quant
        return (self.q[:n], kc, vc, self.cu[:n + 1], self.lens[:n], self.tables[:n], self.scale, self.window,
                *tables)


def _bf16_case(shape: Shape) -> float:
    from anna_core.kernels.reference.paged_attention import paged_attention as ref
    from anna_xpu_kernels import paged_attention as pa

    us = _graph_us(lambda: pa.paged_attention(*shape.bf16_args()))
    err = (pa.paged_attention(*shape.bf16_args())[:2].float() - ref(*shape.bf16_args(2)).float()).abs().max()
    _say(f"{shape.name:12s} bf16 paged_attention            {us:8.1f} us  1.00x  max|err| {err.item():.2e}")
    return us


def _tq_case(shape: Shape, quant: tuple, label: str, base_us: float, tuning=None, splits=None) -> float:
    from anna_core.kernels.reference import turboquant as ref
    from anna_xpu_kernels import turboquant as tq

    def call():
        return tq.paged_attention_turboquant(*shape.tq_args(quant), num_splits=splits, tuning=tuning)

    try:
        us = _graph_us(call)
        err = (call()[:2].float() - ref.paged_attention_turboquant(*shape.tq_args(quant, 2)).float()).abs().max()
    except Exception as e:  # noqa: BLE001 (a variant that fails to compile or launch is reported, not fatal)
        _say(f"{shape.name:12s} {label:32s} FAILED {type(e).__name__}: {str(e)[:200]}")
        return float("nan")
    _say(f"{shape.name:12s} {label:32s} {us:8.1f} us  {us / base_us:5.2f}x  max|err| {err.item():.2e}")
    return us


def _write_case(shape: Shape, quant: tuple, bits: int) -> None:
    """One decode step's cache write at this shape (batch 32 new tokens at random slots): bf16 reshape_and_cache, the
    one-launch TurboQuant write (``chain``: the auto path, and the ``columns`` launch at its default, 32-column chunks
    and 4 warps; ``ANNA_TURBOQUANT_WRITE``), and the torch reference's composition (what a launch-per-op write costs);
    then the share of the step's row bytes on which ``columns`` (after its graph replays) and ``chain`` differ (0 but
    for coordinates within float32 rounding of a decision boundary)."""
    from anna_core.kernels.reference import turboquant as ref
    from anna_xpu_kernels import turboquant_write as tw

    g = torch.Generator(device=DEVICE).manual_seed(1)
    k = torch.randn(BATCH, shape.h_kv, shape.dim, device=DEVICE, dtype=torch.bfloat16, generator=g)
    v = torch.randn(BATCH, shape.h_kv, shape.dim, device=DEVICE, dtype=torch.bfloat16, generator=g)
    slots = torch.randperm(shape.n_blocks * BLOCK, device=DEVICE, generator=g)[:BATCH]
    kc, vc, tables = quant
    k_bf, v_bf = shape.k.clone(), shape.v.clone()

    def bf16():
        k_bf.view(-1, shape.h_kv, shape.dim).index_copy_(0, slots, k)
        v_bf.view(-1, shape.h_kv, shape.dim).index_copy_(0, slots, v)

    def write(path, kc, vc, **settings):
        return lambda: tw.write_with(path, k, v, kc, vc, slots, *tables, **settings)

    base = _graph_us(bf16)
    fused = _graph_us(write("chain", kc, vc))
    kc_col, vc_col = kc.clone(), vc.clone()
    columns = {label: _graph_us(write("columns", kc_col, vc_col, **settings))
               for label, settings in (("", {}), ("32-wide ", {"block_o": 32}), ("4 warps ", {"num_warps": 4}))}
    composed = _graph_us(lambda: ref.turboquant_cache_write(k, v, kc, vc, slots, *tables))
    write("columns", kc_col, vc_col)()  # after the replays: its counters were left at zero
    write("chain", kc, vc)()
    differ = [(a.view(-1, shape.h_kv, a.shape[-1])[slots] != b.view(-1, shape.h_kv, b.shape[-1])[slots]).float().mean()
              for a, b in ((kc, kc_col), (vc, vc_col))]
    _say(f"{shape.name:12s} write {bits}-bit: bf16 index_copy {base:7.1f} us, TurboQuant one launch {fused:7.1f} us, "
         + ", ".join(f"columns {label}{us:7.1f} us" for label, us in columns.items())
         + f", torch-composed reference {composed:7.1f} us; columns vs chain bytes differing: keys "
         f"{differ[0].item():.2e}, values {differ[1].item():.2e}")


def _register_report() -> None:
    """``n_regs`` / ``n_spills`` of every compiled TurboQuant and paged-attention kernel in this process."""
    from anna_xpu_kernels import paged_attention, turboquant, turboquant_basis, turboquant_write

    kernels = [turboquant._tq_attention_kernel, turboquant_basis._tq_query_kernel, turboquant_basis._tq_output_kernel,
               turboquant_write._tq_write_kernel, turboquant_write._tq_write_columns_kernel,
               paged_attention._paged_attention_kernel]
    for kernel in kernels:
        fn = kernel
        while not hasattr(fn, "device_caches") and hasattr(fn, "fn"):  # unwrap @autotune
            fn = fn.fn
        for caches in list(getattr(fn, "device_caches", {}).values()):
            for compiled in list(caches[0].values()):
                try:
                    names = [fn.arg_names[k[0]] if isinstance(k, tuple) else k for k in compiled.src.constants]
                    consts = {n: v for n, v in zip(names, compiled.src.constants.values())
                              if n.startswith(("BLOCK_", "D_CHUNKS", "LOOKUP", "DECODE", "HAS_RING", "QJL", "SPLIT"))}
                except Exception:  # noqa: BLE001 (Triton versions name constants differently)
                    consts = {}
                try:
                    regs, spills = compiled.n_regs, compiled.n_spills
                except Exception as e:  # noqa: BLE001 (not loaded on this device)
                    regs = spills = f"? ({type(e).__name__})"
                _say(f"regs {fn.__name__}: n_regs {regs}, n_spills {spills}, warps {compiled.metadata.num_warps}, "
                     f"shared {compiled.metadata.shared} B, {consts}")


def _choice(choice: str, name: str, **override):
    """The explicit TurboQuantTuning of ``ANNA_TURBOQUANT_DECODE=choice`` at shape ``name``
    (anna_xpu_kernels.turboquant_launch.launch_settings), with ``override``'s fields changed."""
    from anna_xpu_kernels import turboquant_launch as tl

    h_q, h_kv, dim, window, _ = SHAPES[name]
    s = tl.launch_settings(tl.TurboQuantTuning(), True, dim, window is not None, choice)
    fields = {"lookup": s.lookup, "block_n": s.block_n, "num_warps": s.num_warps, "num_stages": s.num_stages,
              "d_chunks": s.d_chunks, "unpack": s.unpack, "max_registers": s.max_registers,
              "opaque_operands": s.opaque, **override}
    return tl.TurboQuantTuning(**fields)


def _candidate_list(name: str, bits: int) -> list[tuple[str, object, int | None]]:
    """``(label, TurboQuantTuning or None, splits)`` in priority order: per shape the ``spread`` decode and ``auto``'s
    choice first (every shape gets those before any variation is timed), then the ``ANNA_TURBOQUANT_DECODE``
    choices (anna_xpu_kernels.turboquant_launch.launch_settings; registers / spills / warp instructions per key from
    ``python -m anna_xpu_kernels.compile_check --registers`` / ``--sass``, sm_90) and launch variations. At 3 bits
    the choices only."""
    C = _choice
    if name == "9B":
        out = [("spread", C("spread", name), None),
               ("auto = words-chunked (2 chunks, 168 regs, 158 wi/key)", C("words-chunked", name), None),
               ("words-capped (128 regs, 173 wi/key; auto until the H200 step)", C("words-capped", name), None),
               ("words-chunked-capped (128 regs, 36 B spill, 156)", C("words-chunked-capped", name), None)]
        if bits != 4:
            return out
        # 8 splits: 1,024 programs; 3 per multiprocessor at 168 registers (396 on an H100's 132) is 2.6 waves, 6
        # splits 1.9 (four at 128 registers: 528, 1.9 waves with 8)
        return out + [
            ("words-chunked, splits 6 (1.9 waves at 168 regs)", C("words-chunked", name), 6),
            ("words-chunked, 1 stage (168 regs, 150 wi/key)", C("words-chunked", name, num_stages=1), None),
            ("words-chunked, splits 16", C("words-chunked", name), 16),
            ("words-chunked-capped, splits 16", C("words-chunked-capped", name), 16),
            ("words-chunked, no cap (209 regs)", C("words-chunked", name, max_registers=255), None),
            ("words (168 regs, 168 wi/key)", C("words", name), None)]
    if name == "E4B-global":
        out = [("spread (605 wi/key)", C("spread", name), None),
               ("auto = words-chunked (32 keys, 1 stage, 269 wi/key)", C("words-chunked", name), None),
               ("words (16 keys, 2 stages, 336 wi/key)", C("words", name), None)]
        if bits != 4:
            return out
        return out + [
            ("words-chunked, splits 4", C("words-chunked", name), 4),
            ("words-chunked, splits 16", C("words-chunked", name), 16),
            ("words-chunked, 2 stages (278 wi/key)", C("words-chunked", name, num_stages=2), None),
            ("words, 1 stage (16 keys, 330 wi/key)", C("words", name, num_stages=1), None),
            ("words-chunked, 8 warps 64 keys 168 regs (273 wi/key)",
             C("words-chunked", name, num_warps=8, block_n=64, max_registers=168), None),
            ("words-chunked, 8 warps 32 keys 2 stages (187 regs, 322)",
             C("words-chunked", name, num_warps=8, num_stages=2), None),
            ("words-chunked, 168 regs (80 B spill)", C("words-chunked", name, max_registers=168), None)]
    out = [("spread", C("spread", name), None), ("auto = words-capped (128 regs, 174 wi/key)",
                                                   C("words-capped", name), None),
           ("words-chunked-capped (128 regs, 157 wi/key)", C("words-chunked-capped", name), None),
           ("words-chunked (168 regs, 159 wi/key)", C("words-chunked", name), None)]
    if bits != 4:
        return out
    # with a window the launch settings leave the split count to the grid plan (no fixed 8 splits); explicit counts:
    return out + [
        ("words-chunked, splits 6 (one wave at 168 regs)", C("words-chunked", name), 6),
        ("words-chunked-capped, splits 4", C("words-chunked-capped", name), 4),
        ("words-capped, splits 4", C("words-capped", name), 4),
        ("words-chunked-capped, splits 16", C("words-chunked-capped", name), 16),
        ("words-chunked-capped, 8 warps 64 keys (154)",
         C("words-chunked-capped", name, num_warps=8, block_n=64), None),
        ("words-chunked, 1 stage (168 regs, 152 wi/key)", C("words-chunked", name, num_stages=1), None)]


def _candidates(names: list[str], budget_s: float, t0: float) -> int:
    """bf16 per shape, then :func:`_candidate_list` (4 and 3-bit QJL keys), one line each with the
    ratio to bf16; variants stop starting after ``budget_s``; then each model's projected step with its best."""
    base, best = {}, {}
    cases = []
    for name in names:
        shape = Shape(name)
        base[name] = _bf16_case(shape)
        for bits in (4, 3):
            cases.append((shape, bits))
    quants, skipped = {}, []
    # spread and auto's choice at every shape and bits first, then the other choices at 4 bits, then the launch
    # variations (4 bits), then the other choices at 3 bits
    for lo, hi, at in ((0, 2, (4, 3)), (2, 4, (4,)), (4, None, (4,)), (2, None, (3,))):
        for shape, bits in cases:
            if bits not in at:
                continue
            todo = _candidate_list(shape.name, bits)[lo:hi]
            for label, tuning, splits in todo:
                if time.time() - t0 > budget_s:
                    skipped.append(f"{shape.name} {bits}-bit {label}")
                    continue
                if (shape.name, bits) not in quants:
                    quants[(shape.name, bits)] = shape.quantized(bits, True)
                    if shape.name == "9B" and bits == 4:  # the step's other TurboQuant cost, once
                        _write_case(shape, quants[(shape.name, bits)], bits)
                us = _tq_case(shape, quants[(shape.name, bits)], f"tq {bits}-bit {label}", base[shape.name],
                              tuning=tuning, splits=splits)
                if us == us and us < best.get((shape.name, bits), (float("inf"), ""))[0]:
                    best[(shape.name, bits)] = (us, label)
    if skipped:
        _say(f"-- budget reached: {len(skipped)} candidates skipped ({'; '.join(skipped)})")
    for (name, bits), (us, label) in best.items():
        _say(f"best {name} {bits}-bit: {label}, {us:.1f} us = {us / base[name]:.2f}x bf16's {base[name]:.1f} us")
    for tag, layers in (("9B", ("9B",)), ("E4B", ("E4B-sliding", "E4B-global"))):
        for bits in (4, 3):
            if all((n, bits) in best for n in layers):
                step = BF16_STEP_MS[tag] + sum(SHAPES[n][4] * (best[(n, bits)][0] - base[n]) / 1e3 for n in layers)
                _say(f"projected {tag} decode step at {bits} bits (best candidates): {step:.2f} ms = "
                     f"{step / BF16_STEP_MS[tag]:.2f}x bf16's {BF16_STEP_MS[tag]} ms (target <= 1.25x)")
    if DEVICE == "cuda":
        _register_report()
    _say(f"-- done in {time.time() - t0:.0f} s")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="the 9B shape at 4 bits only")
    parser.add_argument("--no-sweep", action="store_true", help="defaults only")
    parser.add_argument("--combos", action="store_true", help="sweep combinations of the first sweep's winners (9B)")
    parser.add_argument("--budget-s", type=float, default=100.0, help="start no sweep variant after this")
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny sizes on the CPU through the interpreter")
    parser.add_argument("--no-write", action="store_true", help="skip the cache-write timings")
    parser.add_argument("--write-only", action="store_true",
                        help="only the cache-write line per shape (4 and 3-bit QJL keys) and the registers")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated among " + ", ".join(SHAPES))
    parser.add_argument("--candidates", action="store_true",
                        help="time the decode variants of CANDIDATES per shape (4-bit QJL keys; the 9B also at 3 bits) "
                             "instead of the defaults and the sweeps, then project each model's step with its best")
    a = parser.parse_args()
    if a.cpu_smoke:
        global BATCH, CTX, DEVICE
        BATCH, CTX, DEVICE = 2, 64, "cpu"
        os.environ["TRITON_INTERPRET"] = "1"
    elif not torch.cuda.is_available():
        print("needs CUDA", file=sys.stderr)
        return 2
    from anna_xpu_kernels import turboquant as tq

    t0 = time.time()
    _say(f"device {torch.cuda.get_device_name() if DEVICE == 'cuda' else 'cpu'}, batch {BATCH}, context {CTX}, block {BLOCK}")
    if a.candidates:
        return _candidates(a.shapes.split(","), a.budget_s, t0)
    if a.write_only:
        for name in a.shapes.split(","):
            shape = Shape(name)
            for bits in (4, 3):
                _write_case(shape, shape.quantized(bits, True), bits)
        if DEVICE == "cuda":
            _register_report()
        return 0
    base, best, quants = {}, {}, {}
    names = ["9B"] if a.quick else a.shapes.split(",")
    for name in names:
        shape = Shape(name)
        base[name] = _bf16_case(shape)
        modes = [(4, True)] if a.quick else [(4, True), (3, True), (4, False), (3, False)]
        if name != "9B":
            modes = modes[:2]
        for bits, qjl in modes:
            quant = shape.quantized(bits, qjl)
            quants[(name, bits, qjl)] = (shape, quant)
            us = _tq_case(shape, quant, f"tq {bits}-bit {'qjl' if qjl else 'mse-keys'} default", base[name])
            best.setdefault((name, bits), us)
            if qjl and not a.no_write:
                _write_case(shape, quant, bits)
        _say(f"-- {time.time() - t0:.0f} s")

    def projection(tag: str):
        for bits in (4, 3):
            if tag == "9B" and ("9B", bits) in best:
                delta = SHAPES["9B"][4] * (best[("9B", bits)] - base["9B"]) / 1e3
            elif ("E4B-sliding", bits) in best and ("E4B-global", bits) in best:
                delta = sum(SHAPES[n][4] * (best[(n, bits)] - base[n]) / 1e3 for n in ("E4B-sliding", "E4B-global"))
            else:
                continue
            step = BF16_STEP_MS[tag] + delta
            _say(f"projected {tag} decode step at {bits} bits: {step:.2f} ms = {step / BF16_STEP_MS[tag]:.2f}x "
                 f"bf16's {BF16_STEP_MS[tag]} ms (attention only; target <= 1.25x)")

    projection("9B")
    if not a.quick:
        projection("E4B")
    if DEVICE == "cuda":
        _register_report()
    if a.no_sweep:
        return 0
    T = tq.TurboQuantTuning
    sweeps = {
        ("9B", 4, True): [
            ("shuffle lookup", T(lookup="shuffle"), None), ("stages 1", T(num_stages=1), None),
            ("splits 8", None, 8), ("splits 16", None, 16), ("ieee dots (the old precision)", T(dot="ieee"), None),
            ("shuffle lookup stages 1", T(lookup="shuffle", num_stages=1), None),
            ("block_n 16", T(block_n=16), None), ("warps 4", T(num_warps=4), None),
            ("select lookup", T(lookup="select"), None), ("stages 3", T(num_stages=3), None),
            ("tf32 dots", T(dot="tf32"), None), ("block_n 64", T(block_n=64), None),
        ],
        ("E4B-global", 4, True): [
            ("one chunk, gather, 8 warps (the old default)", T(d_chunks=1, lookup="gather", num_warps=8), None),
            ("block_n 32", T(block_n=32), None), ("block_n 32 warps 8", T(block_n=32, num_warps=8), None),
            ("select lookup", T(lookup="select"), None), ("splits 16", None, 16), ("splits 4", None, 4),
            ("stages 1", T(num_stages=1), None), ("stages 3", T(num_stages=3), None),
        ],
        ("E4B-sliding", 4, True): [("select lookup", T(lookup="select"), None), ("splits 2", None, 2)],
    }
    if a.combos:  # the single changes that won in the first sweep (shuffle lookup, 4 warps, 3 stages, 64 keys), combined
        sweeps = {("9B", 4, True): [
            ("shuffle + warps 4", T(lookup="shuffle", num_warps=4), None),
            ("shuffle + warps 4 + stages 3", T(lookup="shuffle", num_warps=4, num_stages=3), None),
            ("shuffle + stages 3", T(lookup="shuffle", num_stages=3), None),
            ("shuffle + block_n 64", T(lookup="shuffle", block_n=64), None),
            ("warps 4 + stages 3", T(num_warps=4, num_stages=3), None),
            ("warps 4 + block_n 64", T(num_warps=4, block_n=64), None),
            ("shuffle + warps 4 + block_n 64", T(lookup="shuffle", num_warps=4, block_n=64), None),
            ("shuffle + warps 4 + stages 3 + block_n 64", T(lookup="shuffle", num_warps=4, num_stages=3, block_n=64),
             None),
            ("shuffle + warps 4 + splits 8", T(lookup="shuffle", num_warps=4), 8),
        ]}
    for key, variants in sweeps.items():
        if key not in quants:
            continue
        shape, quant = quants[key]
        for label, tuning, splits in variants:
            if time.time() - t0 > a.budget_s:
                _say(f"-- budget reached ({time.time() - t0:.0f} s): remaining variants skipped")
                return 0
            _tq_case(shape, quant, f"tq 4-bit qjl {label}", base[key[0]], tuning=tuning, splits=splits)
    _say(f"-- done in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
