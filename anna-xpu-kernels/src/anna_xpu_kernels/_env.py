"""Environment switches of anna-xpu-kernels (no torch or triton import here): the interpreter
(below), programmatic dependent launch (``ANNA_TRITON_PDL``), the GEMV's norm prologue
(``ANNA_GEMV_NORM_PROLOGUE``), its weight prefetch (``ANNA_GEMV_PREFETCH``), the one-wave GEMV for one row
(``ANNA_GEMV_PERSISTENT``), how many rows the GEMV takes (``ANNA_GEMV_MAX_ROWS``), its post-norm prologue (``ANNA_GEMV_POST_NORM_PROLOGUE``), the value norm fused into
the attention pre-processing (``ANNA_QKV_NORM_ROPE``), the query norm + rotary fused into the attention of a KV-shared
layer (``ANNA_Q_NORM_ROPE_ATTENTION``), Gemma 4's whole q/k/v pre-processing fused into its attention at decode
(``ANNA_QKV_NORM_ROPE_ATTENTION``), the q/k pre-processing of a layer without a value norm fused into its attention
at decode (``ANNA_QK_NORM_ROPE_ATTENTION``: Qwen3-TTS's talker and code predictor), the split merge inside the decode
attention launch (``ANNA_ATTENTION_FUSED_MERGE``),
Gemma 4's per-layer-input block in one launch (``ANNA_POST_NORM_GATED_LINEAR``), the implementation of
``lm_head_topk`` (``ANNA_LM_HEAD_TOPK``) and the TurboQuant decode attention's code unpacking
(``ANNA_TURBOQUANT_DECODE``) and the launch of its cache write (``ANNA_TURBOQUANT_WRITE``). Each exists
to A/B a kernel choice in separate processes
(``h200_run.sh MODE=abenv``) and to rule a kernel out while debugging.

``ANNA_TRITON_INTERPRET=1`` runs the Triton kernels under Triton's CPU interpreter: it sets Triton's
own ``TRITON_INTERPRET=1`` before the kernel modules import triton, and makes the probes accept
``device_type == "cpu"`` so tests and debugging sessions exercise the plugin's registration and
kernels without an accelerator.

``TRITON_INTERPRET=1`` alone only changes how Triton runs kernels; it does not make the probes
accept CPU tensors. (A pytest session that interprets Triton kernels must set it for the whole
process; the CPU model tests of that same session must keep choosing the torch references.)
"""

from __future__ import annotations

import os

INTERPRET_ENV = "ANNA_TRITON_INTERPRET"
TRITON_INTERPRET_ENV = "TRITON_INTERPRET"
_TRUE = ("1", "true", "on", "yes")


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in _TRUE


def cpu_interpret_requested() -> bool:
    """True when ``ANNA_TRITON_INTERPRET`` is set to a true value (probes then accept ``"cpu"``)."""
    return _flag(INTERPRET_ENV)


def enable_interpreter_if_requested() -> bool:
    """Map ``ANNA_TRITON_INTERPRET=1`` onto ``TRITON_INTERPRET=1``; return whether Triton interprets.

    Triton decides at ``@triton.jit`` decoration time whether a kernel is interpreted (and must see
    the same setting for the life of the process), so the kernel modules call this before importing
    triton.
    """
    if _flag(INTERPRET_ENV) and not _flag(TRITON_INTERPRET_ENV):
        os.environ[TRITON_INTERPRET_ENV] = "1"
    return _flag(TRITON_INTERPRET_ENV)


PDL_ENV = "ANNA_TRITON_PDL"
_FALSE = ("0", "false", "off", "no")


def pdl_requested() -> bool:
    """False when ``ANNA_TRITON_PDL`` is set to a false value (``0``): the decode kernels then launch
    without programmatic dependent launch (:mod:`anna_xpu_kernels.pdl`); on by default."""
    return os.environ.get(PDL_ENV, "").strip().lower() not in _FALSE


NORM_PROLOGUE_ENV = "ANNA_GEMV_NORM_PROLOGUE"


def norm_prologue_requested() -> bool | None:
    """``ANNA_GEMV_NORM_PROLOGUE``: a true value fuses every pre-projection RMSNorm into the decode
    GEMV where the kernel takes the shapes, a false value never does, unset (or anything else) leaves it
    to :func:`anna_xpu_kernels.fused_linear.norm_prologue_pays` (for A/B measurements and debugging)."""
    value = os.environ.get(NORM_PROLOGUE_ENV, "").strip().lower()
    return True if value in _TRUE else False if value in _FALSE else None


WQ_FP8_CVT_ENV = "ANNA_WQ_FP8_CVT"


def wq_fp8_cvt_requested() -> bool:
    """False when ``ANNA_WQ_FP8_CVT`` is set to a false value (``0``): the quantized decode GEMV then decodes FP8
    codes with shifts and masks instead of the hardware's ``e4m3x2`` conversion
    (:func:`anna_xpu_kernels.wq_gemv_decode.native_fp8`; for A/B timing and debugging); on by default."""
    return os.environ.get(WQ_FP8_CVT_ENV, "").strip().lower() not in _FALSE


WQ_INT4_PAIRED_ENV = "ANNA_WQ_INT4_PAIRED"


def wq_int4_paired_requested() -> bool:
    """``ANNA_WQ_INT4_PAIRED``: a true value (``1``) makes the quantized decode GEMV decode two int4 codes per shift
    for one or two rows of 16-bit activations (:func:`anna_xpu_kernels.wq_gemv_decode._unit_sums`); off by default
    (an A/B switch: fewer instructions, but the served Qwen3.5-9B step measured slower, BENCHMARKS.md)."""
    return os.environ.get(WQ_INT4_PAIRED_ENV, "").strip().lower() in _TRUE


GEMV_PREFETCH_ENV = "ANNA_GEMV_PREFETCH"


def gemv_prefetch_requested() -> bool:
    """False when ``ANNA_GEMV_PREFETCH`` is set to a false value (``0``): the decode GEMV then loads only
    its first weight tile before waiting for the previous kernel, instead of up to
    :data:`anna_xpu_kernels.gemv.PREFETCH_BYTES` (for A/B measurements); on by default."""
    return os.environ.get(GEMV_PREFETCH_ENV, "").strip().lower() not in _FALSE


GEMV_PERSISTENT_ENV = "ANNA_GEMV_PERSISTENT"


def gemv_persistent_requested() -> bool:
    """False when ``ANNA_GEMV_PERSISTENT`` is set to a false value (``0``): one-row GEMVs then run the
    tiled kernel instead of the one-wave kernel (:mod:`anna_xpu_kernels.gemv_persistent`); on by default."""
    return os.environ.get(GEMV_PERSISTENT_ENV, "").strip().lower() not in _FALSE


GEMV_MAX_ROWS_ENV = "ANNA_GEMV_MAX_ROWS"
GEMV_DEFAULT_MAX_ROWS = 16
GEMV_ROW_LIMIT = 16


def gemv_max_rows() -> int:
    """Most activation rows the decode GEMV (:mod:`anna_xpu_kernels.gemv`) takes; more go to ``F.linear`` (a GEMM).
    :data:`GEMV_DEFAULT_MAX_ROWS` (16: a decode batch of 9-16 rows, e.g. Qwen3-TTS's code predictor at 16 requests,
    keeps the Triton GEMV and its fused prologues / epilogues instead of cuBLAS; measured faster than the earlier 8,
    BENCHMARKS.md) unless ``ANNA_GEMV_MAX_ROWS`` sets another limit from 1 to :data:`GEMV_ROW_LIMIT` (``8``: the
    earlier default).

    Raises:
        ValueError: the variable is set to something other than an integer from 1 to :data:`GEMV_ROW_LIMIT`.
    """
    value = os.environ.get(GEMV_MAX_ROWS_ENV, "").strip()
    if not value:
        return GEMV_DEFAULT_MAX_ROWS
    if not value.isdigit() or not 1 <= int(value) <= GEMV_ROW_LIMIT:
        raise ValueError(f"{GEMV_MAX_ROWS_ENV} must be an integer from 1 to {GEMV_ROW_LIMIT}, got {value!r}")
    return int(value)


POST_NORM_PROLOGUE_ENV = "ANNA_GEMV_POST_NORM_PROLOGUE"


def post_norm_prologue_requested() -> bool:
    """False when ``ANNA_GEMV_POST_NORM_PROLOGUE`` is set to a false value (``0``): ``post_norm_residual_linear``
    then runs ``post_norm_residual`` and the projection as two launches instead of the one-wave GEMV's post-norm
    prologue (for A/B measurements: Gemma's block tails, the last one in the next layer's q/k/v projection);
    on by default."""
    return os.environ.get(POST_NORM_PROLOGUE_ENV, "").strip().lower() not in _FALSE


QKV_NORM_ROPE_ENV = "ANNA_QKV_NORM_ROPE"


def qkv_norm_rope_requested() -> bool:
    """False when ``ANNA_QKV_NORM_ROPE`` is set to a false value (``0``): the probe of ``qkv_norm_rope_cache``
    declines, so Gemma 4 runs its value norm as its own ``rms_norm`` launch before ``qk_norm_rope_cache`` (for A/B
    measurements); on by default."""
    return os.environ.get(QKV_NORM_ROPE_ENV, "").strip().lower() not in _FALSE


Q_NORM_ROPE_ATTENTION_ENV = "ANNA_Q_NORM_ROPE_ATTENTION"
QKV_NORM_ROPE_ATTENTION_ENV = "ANNA_QKV_NORM_ROPE_ATTENTION"
FUSED_SNAKE_ENV = "ANNA_FUSED_SNAKE"


def fused_snake_requested() -> bool:
    """``ANNA_FUSED_SNAKE``: a true value (``1``) lets the ``snake_beta`` kernel (:mod:`anna_xpu_kernels.snake`: one
    launch for an audio decoder's SnakeBeta, seven in torch) serve; off by default until a GPU measures the Qwen3-TTS
    vocoder faster with it (an A/B switch)."""
    return os.environ.get(FUSED_SNAKE_ENV, "").strip().lower() in _TRUE


QK_NORM_ROPE_ATTENTION_ENV = "ANNA_QK_NORM_ROPE_ATTENTION"


def _head_dim_limit(name: str, default: int) -> int:
    """Opt-in switches (off when unset): a true value (``1``, ``on``, ``true``, ``yes``) gives ``default``, a
    number above 1 that limit, anything else (unset, ``0``, ``off``) 0."""
    value = os.environ.get(name, "").strip().lower()
    if value in ("1", "on", "true", "yes"):
        return default
    return int(value) if value.isdigit() else 0


def q_norm_rope_attention_head_dims(default: int) -> int:
    """Largest head dim whose ``q_norm_rope_attention`` the probe accepts. Opt-in until measured on a GPU (the fused
    kernel has only run under Triton's interpreter): 0 unless ``ANNA_Q_NORM_ROPE_ATTENTION`` is set (unset or ``0``:
    a KV-shared layer runs ``q_norm_rope`` and the attention as two launches); ``1`` gives ``default`` (the attention
    kernel's limit), a larger number that limit (e.g. ``256``: only the sliding layers' heads fuse)."""
    return _head_dim_limit(Q_NORM_ROPE_ATTENTION_ENV, default)


def qkv_norm_rope_attention_head_dims(default: int) -> int:
    """Largest head dim whose ``qkv_norm_rope_cache_attention`` the probe accepts, as
    :func:`q_norm_rope_attention_head_dims` (opt-in) but set by ``ANNA_QKV_NORM_ROPE_ATTENTION`` (unset or ``0``: a
    Gemma 4 layer with its own K/V runs ``qkv_norm_rope_cache`` and the attention as two launches)."""
    return _head_dim_limit(QKV_NORM_ROPE_ATTENTION_ENV, default)


def qk_norm_rope_attention_head_dims(default: int) -> int:
    """Largest head dim whose ``qk_norm_rope_cache_attention`` the probe accepts, as
    :func:`q_norm_rope_attention_head_dims` (opt-in until a GPU measures it faster) but set by
    ``ANNA_QK_NORM_ROPE_ATTENTION`` (unset or ``0``: a layer with q/k norms and no value norm, Qwen3-TTS's talker and
    code predictor, runs ``qk_norm_rope_cache`` and the attention as two launches)."""
    return _head_dim_limit(QK_NORM_ROPE_ATTENTION_ENV, default)


ATTENTION_FUSED_MERGE_ENV = "ANNA_ATTENTION_FUSED_MERGE"
FUSED_MERGE_SPLITS = 16
"""Split cap of the fused merge when ``ANNA_ATTENTION_FUSED_MERGE`` is just switched on."""


def attention_fused_merge_splits() -> int:
    """``ANNA_ATTENTION_FUSED_MERGE``: whether a decode batch's paged attention merges its key splits inside its own
    launch (the last split to arrive merges; no merge kernel) and with at most how many splits — 0 (unset, ``0``,
    ``off``: the merge kernel; opt-in until measured on a GPU), :data:`FUSED_MERGE_SPLITS` for a true value (``1``,
    ``on``), or the number given (e.g. ``32``; the kernel takes at most 64)."""
    value = os.environ.get(ATTENTION_FUSED_MERGE_ENV, "").strip().lower()
    if value in _TRUE:
        return FUSED_MERGE_SPLITS
    return min(int(value), 64) if value.isdigit() else 0


POST_NORM_GATED_LINEAR_ENV = "ANNA_POST_NORM_GATED_LINEAR"


def post_norm_gated_linear_requested() -> bool:
    """``ANNA_POST_NORM_GATED_LINEAR``: a true value lets the probe of ``post_norm_residual_gated_linear`` accept (one
    launch for Gemma 4's per-layer-input gate and projection with the MLP's tail before them); off when unset, until
    measured on a GPU."""
    return _flag(POST_NORM_GATED_LINEAR_ENV)


LM_HEAD_TOPK_ENV = "ANNA_LM_HEAD_TOPK"
LM_HEAD_TOPK_IMPLS = ("auto", "one_pass", "gemv_select")


def lm_head_topk_impl() -> str:
    """``ANNA_LM_HEAD_TOPK``: which implementation of ``lm_head_topk`` runs (:mod:`anna_xpu_kernels.lm_head_topk`):
    ``one_pass`` (the fused kernel), ``gemv_select`` (the full head's GEMV, then the Triton selection) or ``auto``
    (unset or anything else: the faster of both, timed once per shape before graph capture)."""
    value = os.environ.get(LM_HEAD_TOPK_ENV, "").strip().lower()
    return value if value in LM_HEAD_TOPK_IMPLS else "auto"


def _choice(name: str, choices: tuple[str, ...]) -> str:
    """The environment variable ``name`` (stripped, lower case; unset or empty: ``choices[0]``), one of ``choices``.

    Raises:
        ValueError: another value.
    """
    value = os.environ.get(name, "").strip().lower() or choices[0]
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


TURBOQUANT_DECODE_ENV = "ANNA_TURBOQUANT_DECODE"
TURBOQUANT_DECODES = ("auto", "spread", "words", "words-capped", "words-chunked", "words-chunked-capped")


def turboquant_decode_requested() -> str:
    """``ANNA_TURBOQUANT_DECODE``: the code unpacking (and with it the lookup, column chunks, keys per tile, stages and
    register cap) of the TurboQuant decode attention on CUDA (:mod:`anna_xpu_kernels.turboquant_codes`;
    :func:`anna_xpu_kernels.turboquant_launch.launch_settings` tells each choice's settings): ``auto`` (unset:
    at a padded head dim of 256 ``words-chunked``, or ``words-capped`` with a sliding window, ``words-chunked`` at
    512, else ``spread``: the fastest measured through decode steps), ``spread``, ``words``, ``words-capped``, ``words-chunked`` (two
    column chunks at 256; 32 keys per tile and one stage at 512) or ``words-chunked-capped`` (at 256 also one stage
    and at most 128 registers).

    Raises:
        ValueError: another value.
    """
    return _choice(TURBOQUANT_DECODE_ENV, TURBOQUANT_DECODES)


TURBOQUANT_WRITE_ENV = "ANNA_TURBOQUANT_WRITE"
TURBOQUANT_WRITES = ("auto", "chain", "columns")


def turboquant_write_requested() -> str:
    """``ANNA_TURBOQUANT_WRITE``: the launch of the TurboQuant cache write
    (:func:`anna_xpu_kernels.turboquant_write.write_path`): ``chain`` (one program per 16 rows and keys / values, a
    chain of ``[16, D] x [D, 64]`` products), ``columns`` (also one per 64-column chunk, the keys' QJL signs finished
    by the last chunk to arrive) or ``auto`` (unset: ``chain`` until ``columns`` is measured on a GPU).

    Raises:
        ValueError: another value.
    """
    return _choice(TURBOQUANT_WRITE_ENV, TURBOQUANT_WRITES)
