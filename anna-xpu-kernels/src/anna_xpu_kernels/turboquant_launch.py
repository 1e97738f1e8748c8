"""Launch settings of the TurboQuant attention kernel (:mod:`anna_xpu_kernels.turboquant`): the explicit overrides
(:class:`TurboQuantTuning`) and the defaults chosen from the shape and, at a decode on CUDA, the decode choice
``ANNA_TURBOQUANT_DECODE`` (:func:`anna_xpu_kernels._env.turboquant_decode_requested`; :func:`launch_settings`).

The registers, spills and instructions per key of each default are checked without a GPU by
``python -m anna_xpu_kernels.compile_check --registers`` / ``--sass`` (sm_90; their cases come from
:func:`launch_settings`), the times on a GPU by ``tools/gpu_experiments/tq_decode_micro.py --candidates``.
"""

from __future__ import annotations

import attrs
from anna_core.kernels.checks import require

from anna_xpu_kernels.paged_attention import WIDE_HEAD_DIM
from anna_xpu_kernels.turboquant_codes import LOOKUPS, UNPACKS

DOTS = ("bf16", "tf32", "ieee")
"""Operand precisions of the attention kernel's dots (accumulation is float32 in all three)."""

CHUNKED = ("words-chunked", "words-chunked-capped")
"""The decode choices that take two column chunks at a padded head dim of 256 (:func:`launch_settings`)."""


@attrs.frozen
class TurboQuantTuning:
    """Launch settings of :func:`anna_xpu_kernels.turboquant.paged_attention_turboquant`'s kernel (None: chosen from
    the shape and the decode choice by :func:`launch_settings`).

    Attributes:
        dot: operand precision of the score and value dots, one of :data:`DOTS`; None: ``ieee`` for a float32
            query (float32 serving: the reference's rounding), else ``bf16``, on tensor cores, whose rounding (unit
            roundoff 2^-8 on the rotated query, the centroids and the probabilities) stays far below the
            quantization's own error (tests/xpu_kernels/test_turboquant.py bounds it).
        lookup: one of :data:`LOOKUPS`; None: ``shuffle`` at a decode with a padded head dim of 256 or 512 (``lane``
            with a ``words`` decode), else ``gather`` (other widths are unmeasured; at 512 the gather's per-element
            addresses spill registers).
        block_n: keys per loop step (a power of two, at least 16; None: 8K coordinates per tile at a decode, 32 keys
            at 256, 16 at 512 (32 with ``words-chunked``)).
        num_warps, num_stages: Triton launch settings (None: 4 warps at a decode with a padded head dim of 256 or
            512: Triton 3.6 fails to compile the shuffle at 512 with 16 keys and 8 warps).
        d_chunks: column chunks the head dim is processed in, 1 or 2 (None: 2 for padded head dims above 256, and
            at 256 with ``words-chunked``): with 2, each key tile's codes are decoded, dotted and accumulated one
            half of the head dim at a time, so no ``[BLOCK_N, BLOCK_D]`` decoded tile is live whole (at a head dim of
            512 the one-chunk kernel spills registers).
        max_registers: a cap on the kernel's registers per thread (ptxas ``.maxnreg``; None: 168 with opaque
            operands at 256, 128 with ``words-capped`` / ``words-chunked-capped`` there, else none): with 128 the
            9B decode kernel compiles without spills, so four programs (16 warps) fit a multiprocessor where three
            did.
        opaque_operands: with the ``lane`` lookup, end the decoded dot operands in side-effecting PTX, so Triton
            gives their dots 16-bit register fragments instead of 8-bit ones
            (:data:`anna_xpu_kernels.turboquant_codes.OPAQUE_DOC`); None: on with a ``words`` decode at padded head
            dims of 256 and 512 except ``words-capped`` at 256.
        unpack: how codes come out of their bit planes, one of :data:`UNPACKS`
            (:mod:`anna_xpu_kernels.turboquant_codes`); None: ``spread``, or ``words`` at a decode on CUDA when
            ``ANNA_TURBOQUANT_DECODE`` asks for a ``words`` decode (then with the ``lane`` lookup at padded head dims
            of 256 and 512).

    The decode defaults (``auto``: at 256 ``words-chunked`` with 4 warps and 8 splits without a sliding window,
    ``words-capped`` with one; ``words-chunked`` at 512: two chunks, 32 keys, one stage) are the fastest measured
    through the Qwen3.5-9B and Gemma 4 E4B steps on an H200 (batch 32, 4k context; BENCHMARKS.md); at 512 ptxas also
    shows no spills at the same 255 registers as ``spread`` and 55% fewer loop instructions per key
    (``python -m anna_xpu_kernels.compile_check --registers`` / ``--sass``).

    Raises:
        ValueError: a value outside the choices above.
    """

    dot: str | None = None
    lookup: str | None = None
    block_n: int | None = None
    num_warps: int | None = None
    num_stages: int | None = None
    d_chunks: int | None = None
    unpack: str | None = None
    max_registers: int | None = None
    opaque_operands: bool | None = None

    def __attrs_post_init__(self) -> None:
        op = "paged_attention_turboquant"
        require(self.dot is None or self.dot in DOTS, op, f"dot must be one of {DOTS}, got {self.dot!r}")
        require(self.lookup is None or self.lookup in LOOKUPS, op, f"lookup must be one of {LOOKUPS}, got {self.lookup!r}")
        require(self.block_n is None or (self.block_n >= 16 and self.block_n & (self.block_n - 1) == 0), op,
                f"block_n must be a power of two >= 16, got {self.block_n}")
        require(self.num_warps is None or self.num_warps in (1, 2, 4, 8, 16), op,
                f"num_warps must be a power of two up to 16, got {self.num_warps}")
        require(self.num_stages is None or self.num_stages >= 1, op,
                f"num_stages must be at least 1, got {self.num_stages}")
        require(self.d_chunks in (None, 1, 2), op, f"d_chunks must be 1 or 2, got {self.d_chunks}")
        require(self.unpack is None or self.unpack in UNPACKS, op,
                f"unpack must be one of {UNPACKS}, got {self.unpack!r}")
        require(self.max_registers is None or 24 <= self.max_registers <= 255, op,
                f"max_registers must lie in [24, 255], got {self.max_registers}")


@attrs.frozen
class Launch:
    """One launch's settings, every field decided (:class:`TurboQuantTuning` describes them; ``splits``: key
    partitions per tile, None: :func:`anna_xpu_kernels.attention_plan.default_num_splits`)."""

    lookup: str
    block_n: int
    num_warps: int
    num_stages: int
    d_chunks: int
    splits: int | None
    unpack: str
    max_registers: int | None
    opaque: bool


def launch_settings(tuning: TurboQuantTuning, decode: bool, block_d: int, windowed: bool,
                    choice: str = "spread") -> Launch:
    """``tuning`` with its unset fields chosen from the shape (``decode``: one query per sequence; ``block_d``: the
    padded head dim; ``windowed``: a sliding window) and, at a decode, ``choice``
    (:data:`anna_xpu_kernels._env.TURBOQUANT_DECODES`):

    * ``spread``: the ``spread`` unpack (the shuffle lookup at 256 and 512).
    * ``words``: the ``words`` unpack, with the ``lane`` lookup and opaque operands at padded head dims of 256
      (capped at 168 registers) and 512.
    * ``words-capped``: the same at 512; at 256 8-bit operand fragments, one stage and at most 128 registers.
    * ``words-chunked``: ``words`` in two column chunks of 128 at 256 (two stages, 168 registers: measured 322 µs
      against ``words-capped``'s 373 at the 9B shape on an H100, BENCHMARKS.md); at 512 (two chunks already) 32 keys
      per tile and one stage (ptxas, sm_90: 255 registers, no spills, 269 warp instructions per key against
      ``words``' 336 and ``spread``'s 605).
    * ``words-chunked-capped``: ``words-chunked`` with one stage and at most 128 registers at 256 (ptxas: no spills,
      157 warp instructions per key against 159, 25 KB of shared memory: four programs per multiprocessor where
      ``words-chunked`` fits three; not yet timed), as ``words-chunked`` at 512.
    * ``auto``: at 256 ``words-chunked`` without a sliding window (the 9B step on an H200: 1.29x bf16's against
      ``words-capped``'s 1.35x) and ``words-capped`` with one (Gemma 4's sliding layers: the two equal alone, and the
      E4B step was faster with it), ``words-chunked`` at 512 (the E4B global layers: 482 µs against ``spread``'s
      646), ``spread`` at other widths (``words`` there not measured).

    Other widths take the ``words`` unpack alone with any ``words`` choice. Prefill (``decode`` False) always takes
    ``spread``. The ``spread`` / ``words`` / ``words-capped`` settings are those measured in BENCHMARKS.md.
    """
    if choice == "auto":  # the fastest through a decode step: H200, BENCHMARKS.md (twenty-fourth session)
        choice = ("words-capped" if windowed else "words-chunked") if block_d == WIDE_HEAD_DIM \
            else "words-chunked" if block_d == 2 * WIDE_HEAD_DIM else "spread"
    wide = block_d * 2 > WIDE_HEAD_DIM
    words = decode and choice in ("words", "words-capped", *CHUNKED)
    capped = words and choice == "words-capped" and block_d == WIDE_HEAD_DIM
    chunked = words and choice in CHUNKED and block_d in (WIDE_HEAD_DIM, 2 * WIDE_HEAD_DIM)
    chunk_capped = chunked and choice == "words-chunked-capped" and block_d == WIDE_HEAD_DIM
    d_chunks = tuning.d_chunks or (2 if block_d > WIDE_HEAD_DIM or chunked else 1)
    # decode: 8K coordinates per K / V tile (32 keys at a head dim of 256, 16 at 512; 32 at 512 when chunked)
    block_n = max(16, min(64, 8192 // block_d)) if decode else 16 if wide else 32
    if chunked and block_d > WIDE_HEAD_DIM:
        block_n = 32
    opaque = words and block_d >= WIDE_HEAD_DIM and not capped
    if decode and block_d >= WIDE_HEAD_DIM:  # measured at 256 (BENCHMARKS.md); at 512 the one setting without
        # register spills (tests/xpu_kernels/test_turboquant_registers.py; the shuffle fails to compile with 8 warps)
        lookup, warps, splits = "lane" if words else "shuffle", 4, 8 if block_d == WIDE_HEAD_DIM and not windowed else None
    else:
        lookup, warps, splits = "gather", 8 if wide else 4, None
    one_stage = capped or chunk_capped or (chunked and block_d > WIDE_HEAD_DIM)
    registers = 128 if capped or chunk_capped else 168 if opaque and block_d == WIDE_HEAD_DIM else None
    return Launch(lookup=tuning.lookup or lookup, block_n=tuning.block_n or block_n,
                  num_warps=tuning.num_warps or warps,
                  num_stages=tuning.num_stages or (1 if one_stage else 2 if wide else 3), d_chunks=d_chunks,
                  splits=splits, unpack=tuning.unpack or ("words" if words else "spread"),
                  max_registers=tuning.max_registers or registers,
                  opaque=opaque if tuning.opaque_operands is None else tuning.opaque_operands)
