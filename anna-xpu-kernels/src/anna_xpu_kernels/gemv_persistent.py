"""Persistent decode GEMV for a single row: ``y[1, N] = x[1, K] @ w[N, K]^T + b``, with the prologues
(:mod:`anna_xpu_kernels.gemv_prologue`) and epilogues (:mod:`anna_xpu_kernels.gemv_epilogue`) of the tiled
GEMV (:mod:`anna_xpu_kernels.gemv`). The docs call it the "one-wave" GEMV: its grid is about one wave.

Why. At batch 1 a decode step is a chain of GEMVs that each read a few to a few tens of MB, joined by
programmatic dependent launch (:mod:`anna_xpu_kernels.pdl`). The tiled GEMV launches thousands of short
programs in several waves; the next kernel may only start once every program of this one has started,
i.e. during its last wave, so each boundary drains the memory pipe, and with a norm prologue every short
program re-reads the row for its mean square. Here the grid is ``G = SMs x PROGRAMS_PER_SM`` long-lived
programs that stride over the weight: the prologue runs once per program, each program keeps two weight
blocks in flight, and the next kernel may start as soon as the last of these few programs has started.
(The register counts of the compiled kernels allow about 6 programs of 4 warps per SM at the 2B width,
fewer than the 8 asked for, so the grid is about 1.3 waves there; 8 still measured fastest.) In PDL
chains of distinct weights and in the captured 2B decode step on an H200 this grid was faster than the
tiled kernel for every one-row projection measured (BENCHMARKS.md, sixth session, with the figures).

Work split. Program ``p`` takes the blocks of ``BLOCK_N`` weight rows ``p, p + G, p + 2G, ...``; a block is
the whole ``[BLOCK_N, K]`` slice, loaded in one ``tl.load`` (``K <= MAX_K``, padded to a power of two
``KP`` and masked). The first block is loaded before the PDL wait; each later one is loaded before the
current one is reduced, so two blocks per program are in flight. After the wait the program computes
the whole activation row once (``[KP]`` float32, rounded to x's dtype exactly as the tiled kernel's
prologue rounds it; with ``ADD_RMS_NORM`` program 0 also writes the new residual), then each block is
``sum(w * x, axis=1)`` in float32. With ``SILU_MUL_OUT`` a block interleaves gate row ``c`` and up row
``I + c`` of its ``BLOCK_N / 2`` outputs. The summation order differs from the tiled kernel's (one
reduction over K instead of per tile), so results agree to float32 rounding of the sum, not bit for bit.
"""

from __future__ import annotations

import functools

import torch

from anna_xpu_kernels import pdl
from anna_xpu_kernels._triton import INTERPRETING, next_pow2, tl, triton
from anna_xpu_kernels.gemv_epilogue import NO_EPILOGUE, store_out
from anna_xpu_kernels.gemv_prologue import act_mul, add_residual, normalize

MAX_K = 8192
"""Longest row the one-load blocks take (``KP = next_pow2(K)`` values per block row); longer rows go to
the tiled GEMV. (A ``KP = 16384`` shape, two rows over 8 warps, one program per multiprocessor, ran Gemma 4's
10240 / 12288-wide down projections in one GPU run of the thirteenth session, but was not measured apart
and would also have moved Qwen3.5-9B's tuned 12288-wide down projection off its measured kernel, with
register spills in the prologue variants: left out until it is measured.)"""

INTERPRETER_SMS = 3
"""Multiprocessors assumed under Triton's interpreter (so that the tests' programs stride over blocks)."""


@functools.cache
def _sms(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def multiprocessors(t: torch.Tensor) -> int:
    """Multiprocessors of ``t``'s device (:data:`INTERPRETER_SMS` under the interpreter)."""
    if INTERPRETING or t.device.type != "cuda":
        return INTERPRETER_SMS
    return _sms(t.device.index if t.device.index is not None else torch.cuda.current_device())


def launch_shape(k: int) -> tuple[int, int, int]:
    """``(BLOCK_N, num_warps, programs per multiprocessor)`` for rows of ``k`` values: 32 weight values per
    thread per block at ``KP <= 4096`` (``BLOCK_N = 4096 / KP`` rows, at least 2), and the programs per
    multiprocessor that won in the PDL chains on an H200 (8 at ``KP <= 2048``; a block of ``KP = 8192``
    (128 values per thread, 2 per multiprocessor) was the fastest one-load shape for K = 6144)."""
    kp = next_pow2(k)
    if kp <= 2048:
        return max(2, 4096 // kp), 4, 8
    if kp == 4096:
        return 2, 8, 4
    return 2, 4, 2


def takes(x: torch.Tensor, k: int) -> bool:
    """Whether this kernel takes the activation rows ``x`` ``[m, k]``: one row, ``1 <= k <= MAX_K``, on a
    CUDA device (or under the interpreter). Intel XPUs keep the tiled kernel: the grid is sized from
    CUDA's multiprocessor count and the shapes were only measured on an H200."""
    return x.shape[0] == 1 and 1 <= k <= MAX_K and (INTERPRETING or x.device.type == "cuda")


@triton.jit
def _weight_rows(block, j, N, BLOCK_N: tl.constexpr, EPILOGUE: tl.constexpr):
    """Weight rows (int64, clamped into the matrix) of tile row ``j`` of row block ``block``."""
    if EPILOGUE == 1 or EPILOGUE == 2:  # interleaved (gate c, up I + c) pairs of the block's BLOCK_N / 2 outputs
        half = N // 2
        c = block * (BLOCK_N // 2) + j // 2
        return (tl.minimum(c, half - 1) + (j % 2) * half).to(tl.int64)
    else:
        return tl.minimum(block * BLOCK_N + j, N - 1).to(tl.int64)


@triton.jit
def _activation_row(x_ptr, r_ptr, nw_ptr, s_ptr, pw, scale, kk, k_ok, K, eps, write_residual,
                    PROLOGUE: tl.constexpr, ZERO_CENTERED: tl.constexpr, HAS_SCALE: tl.constexpr):
    """The ``[KP]`` activation row (float32 values of x's dtype) computed from the raw inputs: ``x``;
    ``round(x * rstd * w)`` (``RMS_NORM``) on ``s = round(x + residual)`` with ``ADD_RMS_NORM`` (also
    stored to ``s_ptr`` where ``write_residual``); ``round(round(act(gate)) * up)`` (``SILU_MUL``,
    ``GELU_TANH_MUL``; ``*_SPLIT``: up at ``r_ptr``); the post-norm tail ``s`` of ``POST_NORM_RESIDUAL`` /
    ``POST_RESIDUAL`` (``pw``: the loaded post-norm weight, ``scale``: the loaded layer scale; ``s`` stored to
    ``s_ptr`` where ``write_residual``), normalised by ``nw`` with ``POST_NORM_RESIDUAL``."""
    a = tl.load(x_ptr + kk, mask=k_ok, other=0.0)
    if PROLOGUE == 7 or PROLOGUE == 8:
        af = a.to(tl.float32)
        normed = normalize(a, tl.rsqrt(tl.sum(af * af, axis=0) / K + eps), pw, x_ptr, ZERO_CENTERED)
        a = add_residual(normed, tl.load(r_ptr + kk, mask=k_ok, other=0.0), x_ptr)
        if HAS_SCALE:
            a = (a.to(tl.float32) * scale).to(x_ptr.dtype.element_ty)
        tl.store(s_ptr + kk, a, mask=k_ok & write_residual)
        if PROLOGUE == 7:
            af = a.to(tl.float32)
            a = normalize(a, tl.rsqrt(tl.sum(af * af, axis=0) / K + eps), tl.load(nw_ptr + kk, mask=k_ok, other=0.0),
                          x_ptr, ZERO_CENTERED)
    if PROLOGUE == 3 or PROLOGUE == 4:
        a = act_mul(a, tl.load(x_ptr + K + kk, mask=k_ok, other=0.0), x_ptr, PROLOGUE == 4)
    if PROLOGUE == 5 or PROLOGUE == 6:
        a = act_mul(a, tl.load(r_ptr + kk, mask=k_ok, other=0.0), x_ptr, PROLOGUE == 6)
    if PROLOGUE == 1 or PROLOGUE == 2:
        if PROLOGUE == 2:
            a = add_residual(a, tl.load(r_ptr + kk, mask=k_ok, other=0.0), x_ptr)
            tl.store(s_ptr + kk, a, mask=k_ok & write_residual)
        s = a.to(tl.float32)
        rstd = tl.rsqrt(tl.sum(s * s, axis=0) / K + eps)
        a = normalize(a, rstd, tl.load(nw_ptr + kk, mask=k_ok, other=0.0), x_ptr, ZERO_CENTERED)
    return a.to(tl.float32)


@triton.jit
def _persistent_gemv_kernel(
    x_ptr, weight_ptr, bias_ptr, y_ptr, r_ptr, nw_ptr, s_ptr, pw_ptr, scale_ptr, N, K, stride_wn, n_blocks, eps,
    HAS_BIAS: tl.constexpr, PROLOGUE: tl.constexpr, ZERO_CENTERED: tl.constexpr, HAS_SCALE: tl.constexpr,
    EPILOGUE: tl.constexpr, USE_PDL: tl.constexpr, BLOCK_N: tl.constexpr, KP: tl.constexpr,
):
    # r_ptr, nw_ptr, s_ptr, pw_ptr, scale_ptr, eps, ZERO_CENTERED: the prologue's inputs and output (unused with
    # PLAIN)
    pdl.launch_dependents(USE_PDL)
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    j = tl.arange(0, BLOCK_N)
    kk = tl.arange(0, KP)
    k_ok = kk < K
    rows = _weight_rows(pid, j, N, BLOCK_N, EPILOGUE)
    w_cur = tl.load(weight_ptr + rows[:, None] * stride_wn + kk[None, :], mask=k_ok[None, :] & (pid < n_blocks),
                    other=0.0, eviction_policy="evict_first")
    pw = 1.0
    scale = 1.0
    if PROLOGUE == 7 or PROLOGUE == 8:  # the post norm's weight and the layer scale: not written in the step
        pw = tl.load(pw_ptr + kk, mask=k_ok, other=0.0, eviction_policy="evict_last")
        if HAS_SCALE:
            scale = tl.load(scale_ptr, eviction_policy="evict_last").to(tl.float32)
    pdl.wait(USE_PDL)
    x = _activation_row(x_ptr, r_ptr, nw_ptr, s_ptr, pw, scale, kk, k_ok, K, eps, pid == 0, PROLOGUE, ZERO_CENTERED,
                        HAS_SCALE)
    one = tl.arange(0, 1)
    for block in range(pid, n_blocks, programs):
        nxt = _weight_rows(block + programs, j, N, BLOCK_N, EPILOGUE)
        w_next = tl.load(weight_ptr + nxt[:, None] * stride_wn + kk[None, :],
                         mask=k_ok[None, :] & (block + programs < n_blocks), other=0.0, eviction_policy="evict_first")
        out = tl.sum(w_cur.to(tl.float32) * x[None, :], axis=1)  # [BLOCK_N]
        if HAS_BIAS:
            out += tl.load(bias_ptr + _weight_rows(block, j, N, BLOCK_N, EPILOGUE)).to(tl.float32)
        store_out(y_ptr, out[None, :], one, block, 1, N, 0, EPILOGUE, BLOCK_N)
        w_cur = w_next


def launch(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, prologue, epilogue: int) -> torch.Tensor:
    """Run the kernel on checked arguments (as :func:`anna_xpu_kernels.gemv.launch`, :func:`takes` true);
    ``prologue`` is a :class:`anna_xpu_kernels.gemv.Prologue`. The grid is :func:`multiprocessors` times
    :func:`launch_shape`'s programs per multiprocessor, at most the number of row blocks.

    Returns:
        ``y`` ``[1, N]`` (``[1, N / 2]`` with a gated epilogue) in x's dtype.
    """
    n, k = weight.shape
    block_n, warps, per_sm = launch_shape(k)
    out_n = n // 2 if epilogue != NO_EPILOGUE else n
    y = torch.empty((1, out_n), dtype=x.dtype, device=x.device)
    n_blocks = triton.cdiv(out_n, block_n // 2) if epilogue != NO_EPILOGUE else triton.cdiv(n, block_n)
    grid = (max(1, min(n_blocks, multiprocessors(x) * per_sm)),)
    p = prologue
    r, nw, s = p.tensors_or(x)
    pw = p.post_weight if p.post_weight is not None else x
    scale = p.scale if p.scale is not None else x
    b = bias.contiguous() if bias is not None else y
    _persistent_gemv_kernel[grid](
        x, weight, b, y, r, nw, s, pw, scale, n, k, weight.stride(0), n_blocks, float(p.eps),
        HAS_BIAS=bias is not None, PROLOGUE=p.mode, ZERO_CENTERED=bool(p.zero_centered), HAS_SCALE=p.scale is not None,
        EPILOGUE=epilogue, BLOCK_N=block_n, KP=next_pow2(k), num_warps=warps, **pdl.launch_options(x))
    return y
