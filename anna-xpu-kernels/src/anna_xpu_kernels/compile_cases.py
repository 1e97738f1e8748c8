"""The kernels :mod:`anna_xpu_kernels.compile_check` compiles ahead of time: each Triton kernel of this package at
representative specialisations (the constexprs of the released shapes' launches), with the argument types of its
signature.

A case is ``(kernel, activation dtype, constexprs, num_warps[, pointer types])``: the activation dtype (``"bf16"``,
``"fp16"``, ``"fp32"``) types every data pointer not named in the index or float32 tables below; a case's own
pointer types override them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

_INDEX_PTRS = {"slot_ptr": "i64", "seq_ptr": "i64", "cu_ptr": "i32", "cu_q_ptr": "i32", "seq_lens_ptr": "i32",
               "tables_ptr": "i32", "tile_seq_ptr": "i32", "tile_first_ptr": "i32",
               "count_ptr": "i32", "ids_ptr": "i64", "sorted_ptr": "i32", "block_expert_ptr": "i32",
               "num_padded_ptr": "i32", "cursor_ptr": "i32", "pos_ptr": "i64", "axis_ptr": "i64",
               "kwords_ptr": "i32", "vwords_ptr": "i32", "rpos_ptr": "i32", "slots_ptr": "i32",
               "valid_ptr": "i32"}
_FP32_PTRS = {"w_ptr", "b_ptr", "g_ptr", "state_ptr", "m_ws_ptr", "l_ws_ptr", "acc_ws_ptr", "ws_ptr", "rw_ptr", "part_ptr",
              "inv_freq_ptr", "qr_ptr", "qs_ptr", "kf_ptr", "vf_ptr", "kc_ptr", "vc_ptr", "noise_ptr"}
_FLOAT_SCALARS = {"eps", "scale", "qk_scale", "factor", "qjl_coef", "inv_temperature"}


def signature(fn: Any, act: str, constexprs: dict[str, Any]) -> dict[str, str]:
    """Triton's signature of ``fn`` for a case: ``constexpr``, a pointer's element type, or a scalar's."""
    sig = {}
    for name in fn.arg_names:
        if name in constexprs:
            sig[name] = "constexpr"
        elif name.endswith("_ptr"):
            sig[name] = "*" + (_INDEX_PTRS.get(name) or ("fp32" if name in _FP32_PTRS else act))
        else:
            sig[name] = "fp32" if name in _FLOAT_SCALARS else "i32"
    return sig


def cases() -> Iterator[tuple[Any, str, dict[str, Any], int]]:
    """(kernel, activation type, constexprs, num_warps) at the Qwen3.5-9B shapes (the Gemma norms at 26B-A4B's)."""
    from anna_xpu_kernels import (
        activations,
        conv1d,
        gated_delta_rule,
        gdn_decode_fused,
        gdn_prefill_prep,
        norms,
        paged_attention,
        post_norms,
        qk_norm_rope,
    )

    pdl, no_pdl = {"USE_PDL": True}, {"USE_PDL": False}  # both variants compile (griddepcontrol on sm_90)
    for act in ("bf16", "fp32"):
        yield norms._rms_norm_kernel, act, {"ZERO_CENTERED": True, "GATED": False, "BLOCK_M": 1, "BLOCK_D": 4096, **pdl}, 8
        yield norms._rms_norm_kernel, act, {"ZERO_CENTERED": False, "GATED": True, "BLOCK_M": 16, "BLOCK_D": 128,
                                                **no_pdl}, 4
        yield conv1d._conv_update_kernel, act, {"WIDTH": 4, "BLOCK_W": 4, "HAS_BIAS": True, "SILU": True,
                                                 "BLOCK_C": 256}, 4
        yield conv1d._conv_prefill_kernel, act, {"WIDTH": 4, "HAS_BIAS": False, "SILU": True, "BLOCK_T": 32,
                                                  "BLOCK_C": 128}, 4
        yield conv1d._conv_prefill_state_kernel, act, {"WIDTH": 4, "BLOCK_W": 4, "BLOCK_C": 256}, 4
        yield gated_delta_rule._gdr_decode_kernel, act, {"BLOCK_K": 128, "BLOCK_V": 32}, 4
        yield gdn_decode_fused._fused_gdn_decode_kernel, act, {  # V split in 8: the last-arriver path
            "WIDTH": 4, "BLOCK_W": 4, "BLOCK_K": 128, "BLOCK_V": 16, "SUB_V": 16, "BLOCK_VH": 128, "NUM_SPLITS": 8,
            **pdl}, gdn_decode_fused.NUM_WARPS
        yield gdn_decode_fused._fused_gdn_decode_kernel, act, {  # whole heads in 64-column sub-chunks
            "WIDTH": 4, "BLOCK_W": 4, "BLOCK_K": 128, "BLOCK_V": 128, "SUB_V": 64, "BLOCK_VH": 128, "NUM_SPLITS": 1,
            **pdl}, gdn_decode_fused.NUM_WARPS
        for mrope in (False, True):  # token positions; M-RoPE rows (a prefill with media)
            yield qk_norm_rope._qk_norm_rope_cache_kernel, act, {"ZERO_CENTERED": True, "MROPE": mrope, "V_NORM": False,
                                                                 "BLOCK_D": 256, **pdl}, 4
        # Gemma 4's global layers (head dim 512) with the value norm inside (qkv_norm_rope_cache)
        yield qk_norm_rope._qk_norm_rope_cache_kernel, act, {"ZERO_CENTERED": False, "MROPE": False, "V_NORM": True,
                                                             "BLOCK_D": 512, **pdl}, 8
        yield norms._add_rms_norm_kernel, act, {"ZERO_CENTERED": True, "BLOCK_M": 1, "BLOCK_D": 4096, **pdl}, 8
        # Gemma 4 26B-A4B's layer tails (hidden 2816): the sandwich-norm tail and the MoE layer's fused ops
        post = {"ZERO_CENTERED": False, "HAS_SCALE": True, "HAS_NEXT": True, "BLOCK_M": 1, "BLOCK_D": 4096, **pdl}
        yield post_norms._post_norm_residual_kernel, act, post, 8
        yield post_norms._dual_post_norm_residual_kernel, act, post, 8
        yield post_norms._rms_norm_pair_kernel, act, {"ZERO_CENTERED": False, "BLOCK_M": 1, "BLOCK_D": 4096, **pdl}, 8
        yield post_norms._post_norm_residual_norm_pair_kernel, act, {"ZERO_CENTERED": False, "BLOCK_M": 1, "BLOCK_D": 4096,
                                                                  **pdl}, 8
        yield activations._silu_and_mul_kernel, act, {"BLOCK_M": 1, "BLOCK_N": 1024, **pdl}, 4
        yield activations._sigmoid_mul_kernel, act, {"BLOCK_M": 4, "BLOCK_N": 256, **no_pdl}, 4
        yield gdn_prefill_prep._gdn_prefill_prep_kernel, act, {"BLOCK_T": 16, "BLOCK_K": 128, "BLOCK_V": 128,
                                                                "BLOCK_R": 2, **pdl}, 4
    attn = {"GROUP": 4, "BLOCK_D": 256, "HAS_WINDOW": False, "UPCAST_DOT": False, "BLOCK_N": 32, "Q_NORM_ROPE": False,
            "ZERO_CENTERED": False, "KV_NEW": False, "V_NORM": False, "FUSED_MERGE": False, "MERGE_S": 64, "MERGE_M": 4,
            "MERGE_U": 1, **pdl}
    yield paged_attention._paged_attention_kernel, "bf16", {**attn, "BLOCK_Q": 4, "BLOCK_M": 16, "SPLIT": True,
                                                            "DECODE": True}, 4
    yield paged_attention._paged_attention_kernel, "bf16", {**attn, "BLOCK_Q": 16, "BLOCK_M": 64, "SPLIT": False,
                                                            "DECODE": False, "HAS_WINDOW": True, **no_pdl}, 8
    yield paged_attention._paged_attention_kernel, "fp32", {**attn, "BLOCK_Q": 4, "BLOCK_M": 16, "SPLIT": True,
                                                            "DECODE": False, "UPCAST_DOT": True}, 4
    # a Gemma 4 E2B KV-shared global layer: q_norm_rope on load (q_norm_rope_attention), head dim 512, 8 query heads
    yield paged_attention._paged_attention_kernel, "bf16", {**attn, "GROUP": 8, "BLOCK_D": 512, "BLOCK_N": 16,
                                                            "BLOCK_Q": 1, "BLOCK_M": 16, "SPLIT": True, "DECODE": True,
                                                            "Q_NORM_ROPE": True}, 8
    # an E4B sliding layer with its own K/V at decode: q/k/v norms, rotary and the cache write inside
    # (qkv_norm_rope_cache_attention)
    yield paged_attention._paged_attention_kernel, "bf16", {**attn, "GROUP": 4, "BLOCK_Q": 1, "BLOCK_M": 16,
                                                            "HAS_WINDOW": True, "SPLIT": True, "DECODE": True,
                                                            "Q_NORM_ROPE": True, "KV_NEW": True, "V_NORM": True}, 4
    # Qwen3-TTS 1.7B's code predictor at decode (16 query heads over 8 KV heads of 128): q/k norms, rotary and the
    # cache write inside, no value norm (qk_norm_rope_cache_attention)
    yield paged_attention._paged_attention_kernel, "bf16", {**attn, "GROUP": 2, "BLOCK_D": 128, "BLOCK_Q": 8,
                                                            "BLOCK_M": 16, "SPLIT": False, "DECODE": True,
                                                            "Q_NORM_ROPE": True, "KV_NEW": True}, 4
    yield paged_attention._merge_splits_kernel, "bf16", {"BLOCK_S": 64, "BLOCK_D": 256, **pdl}, 8
    from anna_xpu_kernels import snake  # an audio decoder's SnakeBeta (Qwen3-TTS's vocoder)

    yield snake._snake_beta_kernel, "bf16", {"BLOCK": snake.MAX_BLOCK}, 4
    yield from _fused_merge_cases(attn)
    yield from _gated_block_cases(pdl)
    from anna_xpu_kernels import per_layer_inputs  # Gemma 4 E2B's per-layer inputs (256 per group)

    yield per_layer_inputs._per_layer_inputs_kernel, "bf16", {"ZERO_CENTERED": False, "BLOCK_P": 256, **pdl}, 2
    from anna_xpu_kernels import soft_cap  # an LM head's soft cap (bf16 logits in, float32 out)

    yield soft_cap._soft_cap_kernel, "bf16", {"BLOCK": soft_cap.BLOCK, **pdl}, 4, {"out_ptr": "*fp32"}
    yield from _turboquant_cases()
    yield from _gemv_cases()
    yield from _persistent_gemv_cases()
    yield from _wq_decode_cases()
    yield from _moe_cases()
    yield from _moe_route_cases()
    yield from _sampling_cases()


def fused_merge_cases(attn: dict[str, Any]) -> list[tuple[Any, str, dict[str, Any], int, str]]:
    """``(kernel, act, constexprs, num_warps, name)``: Gemma 4's decode attention with the split merge inside the
    launch (``ANNA_ATTENTION_FUSED_MERGE``): E2B's sliding layer with its own K/V (q/k/v pre-processing inside, 8
    query heads of 256), its KV-shared global layer (512) and E4B's sliding layer (4 query heads per KV head)."""
    from anna_xpu_kernels import paged_attention

    decode = {**attn, "BLOCK_Q": 1, "BLOCK_M": 16, "SPLIT": True, "DECODE": True, "Q_NORM_ROPE": True,
              "FUSED_MERGE": True}
    kernel = paged_attention._paged_attention_kernel
    return [(kernel, "bf16", {**decode, "GROUP": 8, "HAS_WINDOW": True, "KV_NEW": True, "V_NORM": True, "MERGE_M": 8,
                              "MERGE_U": 4}, 4, "E2B sliding"),
            (kernel, "bf16", {**decode, "GROUP": 8, "BLOCK_D": 512, "BLOCK_N": 16, "MERGE_M": 8, "MERGE_U": 2}, 8,
             "E2B global, KV-shared"),
            (kernel, "bf16", {**decode, "GROUP": 4, "HAS_WINDOW": True, "KV_NEW": True, "V_NORM": True, "MERGE_M": 4,
                              "MERGE_U": 8}, 4, "E4B sliding")]


def _fused_merge_cases(attn: dict[str, Any]) -> Iterator[tuple[Any, str, dict[str, Any], int]]:
    for kernel, act, constexprs, warps, _ in fused_merge_cases(attn):
        yield kernel, act, constexprs, warps


def gated_block_cases(pdl: dict[str, Any]) -> list[tuple[Any, str, dict[str, Any], int, str]]:
    """``(kernel, act, constexprs, num_warps, name)``: Gemma 4's per-layer-input block in one launch
    (:mod:`anna_xpu_kernels.gated_block`) at E2B's and E4B's widths, in :func:`~anna_xpu_kernels.gated_block.launch_shape`'s
    shapes (a layer scale in the E4B case, which Gemma does not pass, to compile that branch too)."""
    from anna_xpu_kernels import gated_block

    out = []
    for name, k, scaled in (("E2B", 1536, False), ("E4B", 2560, True)):
        g_sub, block_g, block_n = gated_block.launch_shape(k, 256, k)
        out.append((gated_block._gated_block_kernel, "bf16",
                    {"HAS_SCALE": scaled, "ZERO_CENTERED": False, "GELU": True, "KP": 1 << (k - 1).bit_length(),
                     "G_SUB": g_sub, "BLOCK_G": block_g, "BLOCK_N": block_n, "KB_P": 256 // block_g, **pdl}, 4, name))
    return out


def _gated_block_cases(pdl: dict[str, Any]) -> Iterator[tuple[Any, str, dict[str, Any], int]]:
    for kernel, act, constexprs, warps, _ in gated_block_cases(pdl):
        yield kernel, act, constexprs, warps


def _wq_decode_cases() -> Iterator[tuple[Any, str, dict[str, Any], int, dict[str, str]]]:
    """The quantized-weight decode GEMV (:mod:`anna_xpu_kernels.wq_gemv_decode`) per scheme at Qwen3.5-9B's tiles: one
    row; two fp16 rows split (int4: two codes per shift, the opt-in pairing); eight rows split with the add+RMSNorm
    prologue and the SwiGLU epilogue; a split with bias; GeGLU; one FP8 row split, its codes converted in hardware;
    an act-order int4 weight (int32 ``perm``) plain and with the norm prologue. Its codes are 8-code units (int4:
    int32; int8 / FP8: int64), its scales float32 (int4: the activations' dtype)."""
    from anna_xpu_kernels import wq_gemv_decode

    base = {"HAS_BIAS": False, "PROLOGUE": 0, "ZERO_CENTERED": False, "EPILOGUE": 0, "USE_PDL": True, "ROW_BLOCK": 1,
            "EVEN_K": True, "SPLIT_K": 1, "PERMUTED": False, "NATIVE_FP8": False,
            "PAIR_INT4": False}
    ptrs = {0: {"q_ptr": "*i32", "ws_ptr": "*fp32", "count_ptr": "*i32"},
            1: {"q_ptr": "*i64", "s_ptr": "*fp32", "z_ptr": "*fp32", "ws_ptr": "*fp32", "count_ptr": "*i32"},
            2: {"q_ptr": "*i64", "s_ptr": "*fp32", "z_ptr": "*fp32", "ws_ptr": "*fp32", "count_ptr": "*i32"}}
    kernel = wq_gemv_decode._wq_decode_kernel
    yield kernel, "bf16", {**base, "SCHEME": 0, "BLOCK_M": 1, "BLOCK_N": 8, "BLOCK_K": 1024}, 4, ptrs[0]
    yield kernel, "fp16", {**base, "SCHEME": 0, "BLOCK_M": 2, "BLOCK_N": 16, "BLOCK_K": 1024, "SPLIT_K": 2,
                           "PAIR_INT4": True}, 4, ptrs[0]
    yield kernel, "bf16", {**base, "SCHEME": 0, "BLOCK_M": 8, "BLOCK_N": 8, "BLOCK_K": 1024, "SPLIT_K": 2,
                           "PROLOGUE": 2, "ZERO_CENTERED": True, "EPILOGUE": 1, "ROW_BLOCK": 4096}, 4, ptrs[0]
    yield kernel, "bf16", {**base, "SCHEME": 1, "BLOCK_M": 1, "BLOCK_N": 16, "BLOCK_K": 2048, "SPLIT_K": 2,
                           "HAS_BIAS": True}, 8, ptrs[1]
    yield kernel, "bf16", {**base, "SCHEME": 2, "BLOCK_M": 4, "BLOCK_N": 4, "BLOCK_K": 1024, "EVEN_K": False}, 4, ptrs[2]
    yield kernel, "fp32", {**base, "SCHEME": 2, "BLOCK_M": 2, "BLOCK_N": 8, "BLOCK_K": 512, "EPILOGUE": 2}, 2, ptrs[2]
    yield kernel, "bf16", {**base, "SCHEME": 2, "BLOCK_M": 1, "BLOCK_N": 16, "BLOCK_K": 1024, "SPLIT_K": 2,
                           "NATIVE_FP8": True}, 4, ptrs[2]
    permuted = {**ptrs[0], "perm_ptr": "*i32"}
    yield kernel, "bf16", {**base, "SCHEME": 0, "BLOCK_M": 1, "BLOCK_N": 8, "BLOCK_K": 1024, "PERMUTED": True}, 4, permuted
    yield kernel, "bf16", {**base, "SCHEME": 0, "BLOCK_M": 1, "BLOCK_N": 16, "BLOCK_K": 1024, "PROLOGUE": 2,
                           "ROW_BLOCK": 2048, "PERMUTED": True}, 4, permuted


def _turboquant_cases() -> Iterator[tuple[Any, ...]]:
    """TurboQuant attention at decode (QJL keys, bf16 dots) with its default launch settings
    (:func:`turboquant_decode_cases`: ``spread`` at every shape, every ``words`` decode at the 9B 4-bit shape, and
    ``auto``'s at E4B's); a float32 prefill with a window and a residual ring; the query projections, the merge with
    the rotation back and the cache write."""
    from anna_xpu_kernels import turboquant

    # the words decodes at one shape and auto's here (--registers compiles them all)
    autos = ("E4B-global 4-bit words-chunked", "E4B-sliding 4-bit words-capped")
    yield from (case[:4] for case in turboquant_decode_cases()
                if "words" not in case[5] or case[5].startswith("9B 4-bit") or case[5] in autos)

    yield turboquant._tq_attention_kernel, "fp32", _tq_case(256, 16, BLOCK_Q=8, BLOCK_M=32, HAS_WINDOW=True,
                                                            SPLIT=False, DECODE=False, HAS_RING=True, DOT=2), 8
    # a prefill chunk over a ring with its own rows (the per-query window), bf16 dots
    yield turboquant._tq_attention_kernel, "bf16", _tq_case(256, 16, BLOCK_Q=8, BLOCK_M=32, SPLIT=False, DECODE=False,
                                                            HAS_RING=True, PER_QUERY=True), 8
    for fn, act, constexprs, num_warps, ptr_types, _ in turboquant_support_cases():
        yield fn, act, constexprs, num_warps, ptr_types


def turboquant_support_cases() -> Iterator[tuple[Any, str, dict[str, Any], int, dict[str, str], str]]:
    """``(kernel, act, constexprs, num_warps, pointer types, name)`` of the launches around the TurboQuant attention
    at a head dim of 512 with QJL keys (tf32 / tf32x3 products, Triton's default 3 stages): the query projections
    and the merge of 8 and 64 splits with the rotation back at every column chunk width, the cache write (and its
    columns launch at 256 and 512)."""
    from anna_xpu_kernels import turboquant_basis as basis
    from anna_xpu_kernels import turboquant_write as write

    for width, launch in basis.LAUNCHES.items():  # every column chunk width (basis_launch picks by row count)
        blocks = {"BLOCK_R": basis.BLOCK_R, "BLOCK_O": launch.block_o, "DOT": 0}
        yield (basis._tq_query_kernel, "bf16", {**blocks, "BLOCK_K": launch.block_k}, launch.num_warps,
               {"m_ptr": "*fp32", "out_ptr": "*fp32"}, f"query projections {width}")
        # 8 splits (the 9B's and batch-32 E4B's plans) and 64 (E4B's global layers at batch 1: 8 merge steps)
        for splits in (8, 64):
            block_s, merge_s, block_k = basis.merge_blocks(splits, launch)
            yield (basis._tq_output_kernel, "bf16", {**blocks, "SPLIT": True, "WS_D": 512, "BLOCK_S": block_s,
                                                     "MERGE_S": merge_s, "BLOCK_K": block_k}, launch.num_warps,
                   {"o_ptr": "*fp32", "rot_ptr": "*fp32"}, f"merge {splits} splits and rotation back {width}")
    write_blocks = {"BLOCK_R": write.BLOCK_R, "BLOCK_O": write.BLOCK_O, "BLOCK_K": write.BLOCK_K, "DOT": 0}
    yield (write._tq_write_kernel, "bf16", {"KBITS": 3, "VBITS": 4, "QJL": True, "PLANE": 64, **write_blocks},
           write.NUM_WARPS, {"kc_ptr": "*u8", "vc_ptr": "*u8", "kcf_ptr": "*fp32", "vcf_ptr": "*fp32",
                             "slot_ptr": "*i64", "rot_ptr": "*fp32", "qjl_ptr": "*fp32", "kcent_ptr": "*fp32",
                             "vcent_ptr": "*fp32", "res_ptr": "*fp32"}, "cache write")
    columns = {"BLOCK_R": write.BLOCK_R, "BLOCK_O": write.COLUMNS_BLOCK_O, "BLOCK_K": write.BLOCK_K, "DOT": 0}
    for d in (256, 512):  # the columns launch (ANNA_TURBOQUANT_WRITE=columns) at the 9B's and E4B's global width
        yield (write._tq_write_columns_kernel, "bf16", {"KBITS": 3, "VBITS": 4, "QJL": True, "PLANE": d // 8,
                                                        **columns},
               write.COLUMNS_NUM_WARPS, {"kc_ptr": "*u8", "vc_ptr": "*u8", "kcf_ptr": "*fp32", "vcf_ptr": "*fp32",
                                         "slot_ptr": "*i64", "rot_ptr": "*fp32", "qjl_ptr": "*fp32",
                                         "kcent_ptr": "*fp32", "vcent_ptr": "*fp32", "ws_ptr": "*fp32",
                                         "g2_ptr": "*fp32", "count_ptr": "*i32"}, f"cache write columns {d}")


def _tq_case(d: int, block_n: int, **extra: Any) -> dict[str, Any]:
    return {"GROUP": 4, "BLOCK_Q": 1, "BLOCK_M": 16, "BLOCK_D": d, "KBITS": 3, "VBITS": 4, "UNIT": 32,
            "PLANE_W": d // 32, "BLOCK_W": d // 32, "K_FIRST": 2, "Z_FIRST": 2 + 3 * d // 32, "V_FIRST": 1,
            "HAS_WINDOW": False, "SPLIT": True, "DECODE": True, "HAS_RING": False, "QJL": True,
            "BLOCK_N": block_n, "DOT": 0, "LOOKUP": 1, "D_CHUNKS": 1, "RING_N": min(block_n, 16), "UNPACK": 0,
            "OPAQUE": False, "PER_QUERY": False, **extra}


TQ_DECODE_SHAPES = (("9B 4-bit", 256, 4, False, False), ("9B 3-bit", 256, 3, False, False),
                    ("E4B-global 4-bit", 512, 4, False, False), ("E4B-global 3-bit", 512, 3, False, False),
                    ("E4B-sliding 4-bit", 256, 4, True, False), ("9B 2-bit", 256, 2, False, False),
                    ("E4B-global 4-bit ring", 512, 4, False, True))
"""``(name, padded head dim, bits, sliding window, residual ring)`` of :func:`turboquant_decode_cases`."""

TQ_DECODE_CHOICES = ("spread", "words", "words-capped", "words-chunked", "words-chunked-capped")
"""The ``ANNA_TURBOQUANT_DECODE`` choices compiled (``auto`` is one of them per width); the ``-capped`` ones at 256
only (at 512 they equal ``words`` / ``words-chunked``)."""


def turboquant_decode_cases() -> Iterator[tuple[Any, str, dict[str, Any], int, dict[str, int], str]]:
    """``(kernel, act, constexprs, num_warps, compile options, name)`` of the TurboQuant decode attention as
    :func:`anna_xpu_kernels.turboquant.paged_attention_turboquant` launches it at batch-32 decode shapes
    (:data:`TQ_DECODE_SHAPES`): Qwen3.5-9B (16 / 4 heads, 256), Gemma 4 E4B's global layers (8 / 2 heads, 512) and
    sliding layers (8 / 2, 256, a window), with QJL keys at 4 and 3 bits; 2 bits and a residual ring (``auto``'s) at
    one shape each; per :data:`TQ_DECODE_CHOICES` (names: the shape's, then the choice unless ``spread``), with
    :func:`anna_xpu_kernels.turboquant_launch.launch_settings`'s settings."""
    from anna_xpu_kernels import turboquant
    from anna_xpu_kernels import turboquant_launch as launch

    for choice in TQ_DECODE_CHOICES:
        for name, d, bits, window, ring in TQ_DECODE_SHAPES:
            if choice.endswith("-capped") and d != 256:
                continue
            s = launch.launch_settings(launch.TurboQuantTuning(), True, d, window, choice)
            case = _tq_case(d, s.block_n, GROUP=4, KBITS=bits - 1, VBITS=bits, Z_FIRST=2 + (bits - 1) * d // 32,
                            HAS_RING=ring, HAS_WINDOW=window, LOOKUP=turboquant.LOOKUPS.index(s.lookup),
                            D_CHUNKS=s.d_chunks, UNPACK=turboquant.UNPACKS.index(s.unpack),
                            OPAQUE=s.opaque and s.lookup == "lane")
            options = {"num_stages": s.num_stages, **({"maxnreg": s.max_registers} if s.max_registers else {})}
            yield (turboquant._tq_attention_kernel, "bf16", case, s.num_warps, options,
                   name if choice == "spread" else f"{name} {choice}")


def _moe_route_cases() -> Iterator[tuple[Any, str, dict[str, Any], int]]:
    """The MoE router: one row per program at E = 256, K = 8 (Qwen3.5-35B-A3B decode) and E = 128 with the
    per-expert scale (Gemma 4 26B-A4B), eight rows per program (prefill), and float32 at the widest E."""
    from anna_xpu_kernels import moe_route
    from anna_xpu_kernels.probes import MAX_ROUTE_EXPERTS

    base = {"TOP_K": 8, "HAS_SCALE": False, "BLOCK_T": 1, "BLOCK_E": 256, "BLOCK_K": 8, "USE_PDL": True}
    yield moe_route._moe_route_kernel, "bf16", base, 1
    yield moe_route._moe_route_kernel, "bf16", {**base, "HAS_SCALE": True, "BLOCK_E": 128}, 1
    yield moe_route._moe_route_kernel, "bf16", {**base, "BLOCK_T": 8, "HAS_SCALE": True, "USE_PDL": False}, 8
    yield moe_route._moe_route_kernel, "fp32", {**base, "TOP_K": 2, "BLOCK_K": 2, "BLOCK_E": MAX_ROUTE_EXPERTS}, 4


def _sampling_cases() -> Iterator[tuple[Any, str, dict[str, Any], int]]:
    """The Gumbel-max draw: Qwen3-TTS's code predictor (2,048 codes, top-k 50) with PDL, no filter, and the widest
    row with the widest filter in float32."""
    from anna_xpu_kernels import gumbel_sample as gs

    base = {"BLOCK": 2048, "K": 64, "FILTER": True, "USE_PDL": True}
    yield gs._top_k_gumbel_kernel, "bf16", base, 4
    yield gs._top_k_gumbel_kernel, "bf16", {**base, "BLOCK": 4096, "K": 1, "FILTER": False, "USE_PDL": False}, 8
    yield gs._top_k_gumbel_kernel, "fp32", {**base, "BLOCK": gs.MAX_VOCAB, "K": gs.MAX_TOP_K}, 8


def _moe_cases() -> Iterator[tuple[Any, str, dict[str, Any], int]]:
    """The MoE alignment (E = 256, as Qwen3.5-35B-A3B) and grouped GEMMs: decode tiles (``BLOCK_M = 16``, PDL)
    and prefill tiles (64, a partial reduction tile), bf16, and fp32 with the exact products."""
    from anna_xpu_kernels import moe, moe_align

    yield moe_align._moe_align_kernel, "bf16", {"BLOCK_M": 16, "BLOCK_E": 256, "BLOCK_B": 32,
                                                "BLOCK_P": moe_align.BLOCK_P, "BLOCK_FILL": moe_align.BLOCK_FILL,
                                                "USE_PDL": True}, 4
    decode = {"UPCAST_DOT": False, "EVEN_K": True, "BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 128, "USE_PDL": True}
    prefill = {"UPCAST_DOT": False, "EVEN_K": False, "BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "USE_PDL": False}
    exact = {**decode, "UPCAST_DOT": True, "BLOCK_K": 64}
    for kernel, extra in ((moe._moe_gate_up_kernel, {"GELU": False}), (moe._moe_down_kernel, {})):
        yield kernel, "bf16", {**decode, **extra}, 4
        yield kernel, "bf16", {**prefill, **extra, **({"GELU": True} if extra else {})}, 8
        yield kernel, "fp32", {**exact, **extra}, 4
    yield from _moe_decode_cases()


def _moe_decode_cases() -> Iterator[tuple[Any, str, dict[str, Any], int]]:
    """The few-token path's GEMVs (:mod:`anna_xpu_kernels.moe_decode`): whole tiles with PDL (35B-A3B's
    H and I), partial reduction tiles (Gemma 4's I = 704), GeGLU, fp32, each depth of loads ahead."""
    from anna_xpu_kernels import moe_decode

    tile = {"TOP_K": 8, "EVEN_K": True, "BLOCK_N": 8, "BLOCK_K": 512, "DEPTH": 1, "USE_PDL": True}
    yield moe_decode._decode_gate_up_kernel, "bf16", {**tile, "GELU": False}, 4
    yield moe_decode._decode_gate_up_kernel, "fp32", {**tile, "GELU": True, "EVEN_K": False, "BLOCK_N": 16,
                                                      "BLOCK_K": 256, "DEPTH": 2, "USE_PDL": False}, 4
    yield moe_decode._decode_down_kernel, "bf16", {**tile, "DEPTH": 2}, 4
    yield moe_decode._decode_down_kernel, "bf16", {**tile, "EVEN_K": False, "BLOCK_K": 256, "DEPTH": 2,
                                                   "USE_PDL": False}, 2
    yield moe_decode._decode_down_kernel, "fp32", {**tile, "TOP_K": 2, "BLOCK_N": 32, "BLOCK_K": 256}, 8


def _gemv_cases() -> Iterator[tuple[Any, str, dict[str, Any], int]]:
    """The decode GEMV: CUDA-core and tensor-core paths, split (with the last-arriver reduction) or not,
    plain or with a fused prologue or epilogue, each with the weight prefetch the launch would use (1, 2
    or 4 tiles) (``weight_ptr`` / ``bias_ptr`` have the activation type, ``ws_ptr`` is float32)."""
    from anna_xpu_kernels import gemv

    for kernel, act, c, warps in _gemv_shapes():
        yield kernel, act, {**c, "PREFETCH": gemv.prefetch_tiles(c["BLOCK_N"], c["BLOCK_K"], c["USE_DOT"], True)}, warps


def _persistent_gemv_cases() -> Iterator[tuple[Any, str, dict[str, Any], int]]:
    """The one-wave GEMV at the 9B width (K = 4096) and the 2B MLP's (K = 6144): plain, the MLP's norm
    prologue with the SwiGLU epilogue, the SiLU-mul prologue with a bias; Gemma 4 E4B's attention tail into
    its gate/up projection (K = 2560, the post-norm prologue with a layer scale, the GeGLU epilogue); the
    long-row form at E4B's down projection (K = 10,240), plain and with the GeGLU prologue."""
    from anna_xpu_kernels import gemv_persistent, gemv_persistent_long

    base = {"HAS_BIAS": False, "PROLOGUE": 0, "ZERO_CENTERED": False, "HAS_SCALE": False, "EPILOGUE": 0,
            "USE_PDL": True}
    for k, extra in ((4096, {}), (4096, {"PROLOGUE": 2, "ZERO_CENTERED": True, "EPILOGUE": 1}),
                     (6144, {"PROLOGUE": 3, "HAS_BIAS": True}),
                     (2560, {"PROLOGUE": 7, "HAS_SCALE": True, "EPILOGUE": 2})):
        block_n, warps, _ = gemv_persistent.launch_shape(k)
        yield (gemv_persistent._persistent_gemv_kernel, "bf16",
               {**base, **extra, "BLOCK_N": block_n, "KP": 1 << (k - 1).bit_length()}, warps)
    long_base = {"HAS_BIAS": False, "PROLOGUE": 0, "EPILOGUE": 0, "USE_PDL": True}
    for k, extra in ((10240, {}), (10240, {"PROLOGUE": 4, "HAS_BIAS": True})):
        block_n, kc, warps, _ = gemv_persistent_long.launch_shape(k)
        yield (gemv_persistent_long._long_gemv_kernel, "bf16",
               {**long_base, **extra, "BLOCK_N": block_n, "KC": kc, "NK": -(-k // kc)}, warps)


def _gemv_shapes() -> Iterator[tuple[Any, str, dict[str, Any], int]]:
    from anna_xpu_kernels import gemv

    base = {"HAS_BIAS": False, "UPCAST_DOT": False, "EVEN_K": True, "SPLIT_K": 1, "PROLOGUE": 0, "ZERO_CENTERED": False,
            "EPILOGUE": 0, "USE_PDL": True, "ROW_BLOCK": 1, "DEEP_PREFETCH": True}
    yield gemv._gemv_kernel, "bf16", {**base, "BLOCK_M": 1, "BLOCK_N": 32, "BLOCK_K": 256, "USE_DOT": False}, 4
    yield gemv._gemv_kernel, "bf16", {**base, "BLOCK_M": 2, "BLOCK_N": 8, "BLOCK_K": 512, "USE_DOT": False,
                                      "EVEN_K": False, "SPLIT_K": 3, "USE_PDL": False}, 4
    yield gemv._gemv_kernel, "bf16", {**base, "BLOCK_M": 8, "BLOCK_N": 64, "BLOCK_K": 128, "USE_DOT": True,
                                      "SPLIT_K": 4, "HAS_BIAS": True}, 4
    yield gemv._gemv_kernel, "fp32", {**base, "BLOCK_M": 4, "BLOCK_N": 64, "BLOCK_K": 128, "USE_DOT": True,
                                      "UPCAST_DOT": True, "EVEN_K": False}, 4
    # the fused prologues (anna_xpu_kernels.gemv_prologue): add+RMSNorm, RMSNorm, SiLU-mul
    yield gemv._gemv_kernel, "bf16", {**base, "BLOCK_M": 1, "BLOCK_N": 8, "BLOCK_K": 512, "USE_DOT": False,
                                      "SPLIT_K": 4, "PROLOGUE": 2, "ZERO_CENTERED": True, "ROW_BLOCK": 4096}, 4
    yield gemv._gemv_kernel, "bf16", {**base, "BLOCK_M": 8, "BLOCK_N": 64, "BLOCK_K": 128, "USE_DOT": True,
                                      "PROLOGUE": 1, "ROW_BLOCK": 256}, 4
    yield gemv._gemv_kernel, "bf16", {**base, "BLOCK_M": 2, "BLOCK_N": 16, "BLOCK_K": 256, "USE_DOT": False,
                                      "SPLIT_K": 2, "PROLOGUE": 3}, 4
    yield gemv._gemv_kernel, "fp32", {**base, "BLOCK_M": 4, "BLOCK_N": 64, "BLOCK_K": 128, "USE_DOT": True,
                                      "UPCAST_DOT": True, "EVEN_K": False, "PROLOGUE": 3}, 4
    # the SwiGLU epilogue of a merged gate/up projection: plain, split-K last arriver, tensor cores
    yield gemv._gemv_kernel, "bf16", {**base, "BLOCK_M": 1, "BLOCK_N": 16, "BLOCK_K": 512, "USE_DOT": False,
                                      "EPILOGUE": 1}, 4
    yield gemv._gemv_kernel, "bf16", {**base, "BLOCK_M": 1, "BLOCK_N": 8, "BLOCK_K": 256, "USE_DOT": False,
                                      "SPLIT_K": 2, "EPILOGUE": 1}, 4
    yield gemv._gemv_kernel, "bf16", {**base, "BLOCK_M": 8, "BLOCK_N": 64, "BLOCK_K": 128, "USE_DOT": True,
                                      "EPILOGUE": 1}, 4
    # the MLP's input norm and its SwiGLU epilogue in one launch (add_rms_norm_linear_act_mul)
    yield gemv._gemv_kernel, "bf16", {**base, "BLOCK_M": 1, "BLOCK_N": 4, "BLOCK_K": 512, "USE_DOT": False,
                                      "PROLOGUE": 2, "ZERO_CENTERED": True, "EPILOGUE": 1, "ROW_BLOCK": 2048}, 4
