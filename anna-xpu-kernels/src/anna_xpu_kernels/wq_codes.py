"""How the quantized decode GEMV (:mod:`anna_xpu_kernels.wq_gemv_decode`) turns its codes into exact float32 values
in registers: one shift and one three-input logic instruction per code (:func:`_code_f`; int4 two codes per shift
with :func:`_int4_pair`), or for FP8 on NVIDIA sm_89+ the hardware's e4m3 conversion (:func:`_e4m3x4`).
"""

from __future__ import annotations

from anna_xpu_kernels._triton import INTERPRETING, tl, triton

CODE_BITS = {"int4": (0x780000, 0x3F800000), "int8": (0x7F8000, 0x3FC00000), "fp8": (0x87F00000 - (1 << 32), 0)}
"""``(code_mask, one_bits)`` of :func:`_code_f` per scheme."""

INTERPRET: tl.constexpr = tl.constexpr(INTERPRETING)
"""Whether kernels run under Triton's interpreter (:func:`_e4m3x4`'s stand-in for its inline PTX)."""


@triton.jit
def _code_f(half, J: tl.constexpr, SCHEME: tl.constexpr, code_mask, one_bits):
    """The float32 ``f_j`` of code ``J`` of each int32 word ``half`` (int4: 8 codes, int8 / FP8: 4), exact, with no
    conversion instruction: a shift, then one three-input logic instruction ``(t & code_mask) ^ one_bits`` (the
    launcher passes the two constants as arguments, so the compiler keeps them in registers and fuses the
    ``and`` and the ``xor``; :data:`CODE_BITS`):

    * int4 (bits ``4J .. 4J+3``): the code at bits 19..22 in the bits of 1.0: ``1 + q / 16``;
    * int8 (byte ``J``, signed): the byte at bits 15..22, its sign bit flipped: ``1 + (q + 128) / 256``;
    * FP8 e4m3 (byte ``J``): sign to bit 31, exponent and mantissa to bits 20..26 (the byte moved to the top and
      shifted down by 4 with its sign copied, then masked): the value times ``2^-120`` (normal codes are normal
      float32 numbers, subnormal codes float32 subnormals, which the kernels do not flush).
    """
    if SCHEME == 0:
        if J <= 4:
            t = half << (19 - 4 * J)
        else:
            t = half >> (4 * J - 19)  # arithmetic shift: the copied sign bits are masked off
    elif SCHEME == 1:
        if J <= 1:
            t = half << (15 - 8 * J)
        else:
            t = half >> (8 * J - 15)
    else:
        if J < 3:
            t = (half << (24 - 8 * J)) >> 4
        else:
            t = half >> 4
    return ((t & code_mask) ^ one_bits).to(tl.float32, bitcast=True)


@triton.jit
def _int4_pair(t, code_mask, one_bits):
    """The float32 ``f`` of the two codes at bits 15..22 of the shifted int32 words ``t`` (two of a unit's codes
    moved there by one shift, :func:`anna_xpu_kernels.wq_gemv_decode._unit_sums`), exact, one three-input logic
    instruction each: the code at bits 19..22 in the bits of 1.0 (``1 + q / 16``, :data:`CODE_BITS`) and the
    code at bits 15..18 in the bits of 16.0 (``16 + q / 16``: the mask shifted down by 4, the exponent raised by
    4)."""
    hi = ((t & code_mask) ^ one_bits).to(tl.float32, bitcast=True)
    lo = ((t & (code_mask >> 4)) ^ (one_bits + 0x02000000)).to(tl.float32, bitcast=True)
    return hi, lo


@triton.jit
def _e4m3x4(half):
    """The float32 values of the four FP8 e4m3 codes of each int32 word ``half`` (byte ``J`` is the ``J``-th
    result), exact, by the hardware's conversion (PTX ``cvt.rn.f16x2.e4m3x2``, sm_89 and later: two codes to two
    float16 in one instruction; every e4m3 value is a float16 one), then float16 to float32. Compiled CUDA code
    only (inline PTX: the launcher sets ``NATIVE_FP8`` only there,
    :func:`anna_xpu_kernels.wq_gemv_decode.native_fp8`). Under Triton's interpreter, which runs no PTX, Triton's
    own FP8 conversion of each byte stands in (tests force ``NATIVE_FP8`` there)."""
    if INTERPRET:
        b0 = (half & 255).to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(tl.float32)
        b1 = ((half >> 8) & 255).to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(tl.float32)
        b2 = ((half >> 16) & 255).to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(tl.float32)
        b3 = ((half >> 24) & 255).to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(tl.float32)
        return b0, b1, b2, b3
    return tl.inline_asm_elementwise(
        "{ .reg .b16 l, h; .reg .b32 a, b; .reg .f16 a0, a1, b0, b1; mov.b32 {l, h}, $4; "
        "cvt.rn.f16x2.e4m3x2 a, l; cvt.rn.f16x2.e4m3x2 b, h; mov.b32 {a0, a1}, a; mov.b32 {b0, b1}, b; "
        "cvt.f32.f16 $0, a0; cvt.f32.f16 $1, a1; cvt.f32.f16 $2, b0; cvt.f32.f16 $3, b1; }",
        "=r,=r,=r,=r,r", [half], dtype=(tl.float32, tl.float32, tl.float32, tl.float32), is_pure=True, pack=1)
