"""From a TurboQuant row's bit planes to a tile of dot operands, inside :mod:`anna_xpu_kernels.turboquant`'s attention
kernel (the row layout: :mod:`anna_core.kv_quant.layout`; a plane holds one bit of every coordinate, coordinate ``j``
at bit ``j % UNIT`` of the plane's unit ``j // UNIT``, units of 32 or 8 bits).

A decode step is compute bound, not memory bound: a 4-bit key and value row is ~3.4x fewer bytes than bf16's, and
each coordinate's code must be assembled from its planes, looked up and fed to a tensor-core dot. Two ways to
assemble the codes (:data:`UNPACKS`):

* ``spread`` (:func:`codes_spread`): a ``[N, W, UNIT]`` tile spread over the threads; each coordinate shifts its
  bit out of its unit by its own amount (64-bit funnel shifts) and every thread holding one of a unit's
  coordinates reads the unit. The decoded tile has one element per thread along the row, so its conversion to the
  dot's operand layout stores one 16-bit element at a time. At Qwen3.5-9B's decode shape (4-bit QJL keys, 32 keys
  x 256 coordinates per tile, 4 warps) its loop is 2,712 SASS instructions per thread (sm_90, ``python -m
  anna_xpu_kernels.compile_check --sass``).
* ``words`` (:func:`codes_words`): each thread owns whole units. The planes are first combined per unit into four
  nibble words (nibble ``i`` of word ``k`` holds the code of coordinate ``4 i + k``: two operations per plane for
  eight coordinates), then a tree of ``tl.join``\\ s shifts them apart by constants inside the thread (about one
  shift per coordinate) and one mask isolates each code. The tile's columns come out permuted within each unit
  (column ``k UNIT / 4 + i`` holds coordinate ``4 i + k``: :func:`word_order`); the kernel loads the query, the
  residual ring's rows and stores the output with the same permutation, so no data moves for it. The decoded tile
  has a whole unit per thread along the row: its operand stores are 16-byte vectors.

And a lookup (:data:`LOOKUPS`): ``lane`` (:func:`centroids`) shuffles the centroid from the lane whose index is the
code (lane ``l`` holds ``c[l % LEVELS]``), one ``shfl.sync`` per coordinate in whatever layout the tile has, where
``tl.gather`` (``shuffle``) made Triton move the ``words`` tile to another layout first (through shared memory).
With ``words`` and ``lane`` the 9B loop is 1,535 instructions per thread; with opaque operands (:data:`OPAQUE_DOC`)
1,459; and as the shuffle's segment mask reads only a code's own bits, no mask isolates them: 1,348 (-50%; Gemma 4
E4B's 512-wide global layers: 2,422 -> 1,344 per 16 keys, -45%). ``lane`` is inline PTX: CUDA only
(the interpreter runs ``gather`` in its place: the same values).
"""

from __future__ import annotations

from anna_xpu_kernels._triton import tl, triton

OPAQUE_DOC = """Triton sizes the register fragments of a tensor-core operand (``kWidth``) from the narrowest load its
value traces back to through pure elementwise operations, halved if a ``tl.join`` lies on the way: through the
``words`` unpack's joins a bf16 tile counts as 8-bit, so its dots take 8-bit fragments (``kWidth`` 4), and the
fragments are then rearranged by register moves (~250 ``IMAD.MOV`` per thread per 9B tile). Ending the decoded
operand in a side-effecting PTX statement (the lane shuffle, the sign pattern) stops the trace: 16-bit fragments,
7% fewer instructions at the 9B shape (1,430 against 1,535 per 32 keys; 15% at 512) but 194 registers at 256 (168
with 8-bit fragments), so the ``words`` default there caps them at 168 (1,459 instructions, no spills)."""

UNPACKS = ("spread", "words")
"""How a tile's codes come out of their bit planes (module docstring)."""

LOOKUPS = ("shuffle", "gather", "select", "lane")
"""How a code becomes its centroid: ``tl.gather`` from the codebook held in registers (warp shuffles; Triton 3.6
fails to compile it where the gather is not warp-local, e.g. a head dim of 512 with 16 keys and 8 warps, or a
codebook of 2 or 4 entries: those take the selects), a load from the (L1-resident) codebook in global memory, a
chain of selects in registers, or (``lane``, CUDA only) one ``shfl.sync`` from the lane numbered by the code."""


@triton.jit
def codes_spread(ptr, row, first, n_words, ok, BITS: tl.constexpr, PLANE_W: tl.constexpr, BLOCK_W: tl.constexpr,
                 UNIT: tl.constexpr):
    """Centroid indices ``[N, BLOCK_W * UNIT]`` int32 of ``N`` rows starting at ``row`` ``[N]`` (in units of
    ``UNIT`` bits, 8 or 32, little endian): plane ``p`` is the ``PLANE_W`` units from ``first + p * PLANE_W``,
    coordinate ``j`` bit ``j % UNIT`` of unit ``j // UNIT``; ``first`` may point into a plane (a column chunk), whose
    first ``n_words`` units are read. Each unit is loaded once per plane (``[N, BLOCK_W]``) and spread over its
    ``UNIT`` coordinates by shifts in registers; rows not ``ok`` and padding read 0. Columns in coordinate order."""
    w = tl.arange(0, BLOCK_W)
    t = tl.arange(0, UNIT).to(tl.uint64)
    mask = ok[:, None] & (w < n_words)[None, :]
    idx = tl.zeros((row.shape[0], BLOCK_W, UNIT), tl.int32)
    for p in tl.static_range(BITS):
        unit = tl.load(ptr + row[:, None] + (first + p * PLANE_W) + w[None, :], mask=mask, other=0)
        # bit t of the unit, moved to bit p: one 64-bit (funnel) shift and one masked or per coordinate
        wide = unit.to(tl.uint32, bitcast=unit.dtype == tl.int32).to(tl.uint64) << p
        idx |= ((wide[:, :, None] >> t[None, None, :]) & (1 << p)).to(tl.int32)
    return tl.reshape(idx, (row.shape[0], BLOCK_W * UNIT))


@triton.jit
def codes_words(ptr, row, first, n_words, ok, BITS: tl.constexpr, PLANE_W: tl.constexpr, BLOCK_W: tl.constexpr,
                UNIT: tl.constexpr):
    """The codes :func:`codes_spread` reads (same arguments, ``BITS`` at most 4), each unit expanded inside its
    thread: uint32 ``[N, BLOCK_W * UNIT]`` whose low 4 bits are the code (higher bits: other coordinates' codes, to
    be masked off), columns in :func:`word_order` within each unit."""
    w = tl.arange(0, BLOCK_W)
    mask = ok[:, None] & (w < n_words)[None, :]
    ones: tl.constexpr = 0x11111111 if UNIT == 32 else 0x11
    q0 = tl.zeros((row.shape[0], BLOCK_W), tl.uint32)
    q1 = tl.zeros((row.shape[0], BLOCK_W), tl.uint32)
    q2 = tl.zeros((row.shape[0], BLOCK_W), tl.uint32)
    q3 = tl.zeros((row.shape[0], BLOCK_W), tl.uint32)
    for p in tl.static_range(BITS):  # nibble i of q_k: the code of coordinate 4 i + k
        unit = tl.load(ptr + row[:, None] + (first + p * PLANE_W) + w[None, :], mask=mask, other=0)
        u = unit.to(tl.uint32, bitcast=unit.dtype == tl.int32)
        q0 |= (u & ones) << p
        q1 |= ((u >> 1) & ones) << p
        q2 |= ((u >> 2) & ones) << p
        q3 |= ((u >> 3) & ones) << p
    x = tl.join(tl.join(q0, q2), tl.join(q1, q3))  # [N, W, 2, 2]: element (a, b) is q_{2a + b}
    if UNIT == 32:  # then nibble i = 4 e + 2 f + g at the bottom of element (a, b, e, f, g)
        x = tl.join(x, x >> 16)
        x = tl.join(x, x >> 8)
    x = tl.join(x, x >> 4)
    return tl.reshape(x, (row.shape[0], BLOCK_W * UNIT))


@triton.jit
def word_order(col, UNIT: tl.constexpr):
    """The coordinate held by column ``col`` (int32, any shape) of a :func:`codes_words` tile: column
    ``k UNIT / 4 + i`` of a unit holds its coordinate ``4 i + k``."""
    return col // UNIT * UNIT + 4 * (col % (UNIT // 4)) + col % UNIT // (UNIT // 4)


@triton.jit
def _lane_shuffle(book, idx, LEVELS: tl.constexpr, OPAQUE: tl.constexpr):
    """Lane ``idx % LEVELS``'s ``book`` within this lane's segment of ``LEVELS`` lanes (int32, elementwise; the
    books repeat every ``LEVELS`` lanes): the shuffle's segment mask (bits 8-12 of its ``c`` operand) keeps this
    lane's high lane bits, so only the code's low bits are read and the bits above it need no masking. ``OPAQUE``:
    as a side-effecting asm statement (:data:`OPAQUE_DOC`)."""
    c = tl.zeros(idx.shape, tl.int32) + (((31 & ~(LEVELS - 1)) << 8) | 31)
    if OPAQUE:
        return tl.inline_asm_elementwise("shfl.sync.idx.b32 $0, $1, $2, $3, 0xffffffff;", "=r,r,r,r", [book, idx, c],
                                         dtype=tl.int32, is_pure=False, pack=1)
    else:
        return tl.inline_asm_elementwise("shfl.sync.idx.b32 $0, $1, $2, $3, 0xffffffff;", "=r,r,r,r", [book, idx, c],
                                         dtype=tl.int32, is_pure=True, pack=1)


@triton.jit
def centroids(c_ptr, idx, LEVELS: tl.constexpr, LOOKUP: tl.constexpr, BF16: tl.constexpr = False,
              OPAQUE: tl.constexpr = False):
    """``c[idx]`` (``idx``'s shape) for a codebook of ``LEVELS`` entries (at most 32), by ``LOOKUPS[LOOKUP]`` (the
    ``shuffle`` only for codebooks of 8 or more entries: Triton 3.6 fails to compile it for 2 or 4 at some tile
    shapes, where one or three selects do the lookup anyway): float32, or bf16 with ``lane`` and ``BF16`` (each lane
    holds its centroid rounded to bf16 in both halves of a word, so no float32 to bf16 conversion follows the
    shuffle: the pairs of a bf16 operand are put together by byte permutes). ``lane`` reads only the low
    ``log2(LEVELS)`` bits of ``idx`` (higher bits may hold anything); the other lookups need exact codes. ``OPAQUE``
    (``lane`` only): the shuffle as a side-effecting statement (:data:`OPAQUE_DOC`)."""
    if LOOKUP == 3:
        # lane l holds c[l % LEVELS] (one load per thread, hoisted out of the loop: the same pure inputs), then each
        # coordinate takes lane idx's value by one warp shuffle, whatever the tile's layout
        zero = tl.zeros(idx.shape, tl.int32)
        if BF16:
            book = tl.inline_asm_elementwise(
                "{ .reg .u32 l; .reg .u64 a; .reg .f32 f; .reg .b16 h; mov.u32 l, %laneid; and.b32 l, l, $2; "
                "mul.wide.u32 a, l, 4; add.u64 a, a, $1; ld.global.nc.f32 f, [a]; cvt.rn.bf16.f32 h, f; "
                "mov.b32 $0, {h, h}; }",
                "=r,l,r", [c_ptr + zero, zero + (LEVELS - 1)], dtype=tl.int32, is_pure=True, pack=1)
            val = _lane_shuffle(book, idx, LEVELS, OPAQUE).to(tl.int16).to(tl.bfloat16, bitcast=True)
        else:
            book = tl.inline_asm_elementwise(
                "{ .reg .u32 l; .reg .u64 a; mov.u32 l, %laneid; and.b32 l, l, $2; "
                "mul.wide.u32 a, l, 4; add.u64 a, a, $1; ld.global.nc.u32 $0, [a]; }",
                "=r,l,r", [c_ptr + zero, zero + (LEVELS - 1)], dtype=tl.int32, is_pure=True, pack=1)
            val = _lane_shuffle(book, idx, LEVELS, OPAQUE).to(tl.float32, bitcast=True)
    elif LOOKUP == 0 and LEVELS >= 8:
        book = tl.load(c_ptr + tl.arange(0, LEVELS))
        val = tl.gather(tl.broadcast_to(book[None, :], (idx.shape[0], LEVELS)), idx, 1)
    elif LOOKUP == 1:
        val = tl.load(c_ptr + idx)
    else:
        val = tl.zeros(idx.shape, tl.float32) + tl.load(c_ptr)
        for level in tl.static_range(1, LEVELS):
            val = tl.where(idx >= level, tl.load(c_ptr + level), val)
    return val


@triton.jit
def signs(bits, BF16: tl.constexpr, OPAQUE: tl.constexpr = False):
    """``+1`` where bit 0 of ``bits`` (integer, any shape) is set, else ``-1``: with ``BF16`` the bf16 bit pattern
    made from the bit (a shift and a logic operation, no conversion; with ``OPAQUE`` as a side-effecting PTX
    statement, CUDA only: :data:`OPAQUE_DOC`), else float32."""
    if BF16 and OPAQUE:
        return tl.inline_asm_elementwise(
            "{ .reg .b32 t; shl.b32 t, $1, 15; and.b32 t, t, 0x8000; xor.b32 $0, t, 0xBF80; }", "=r,r",
            [bits.to(tl.int32, bitcast=True)], dtype=tl.int32, is_pure=False, pack=1,
        ).to(tl.int16).to(tl.bfloat16, bitcast=True)
    elif BF16:
        return (((bits << 15) & 0x8000) ^ 0xBF80).to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        return tl.where((bits & 1) != 0, 1.0, -1.0)
