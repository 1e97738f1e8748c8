"""Sample inputs of anna-core's ops: what the kernel conformance suite runs every implementation on.

Each op contract names one of these functions as its ``examples`` (``OpContract.examples``):
``examples(device, dtype) -> list[OpExample]``, a few small, seeded cases (the same tensors on every
call) covering the op's paths: ragged batches, ``None`` optionals, strided views, each activation,
fresh and non-zero states. Activations are in ``dtype``; what the contract fixes (float32 recurrent
state and log decays, int32 / int64 indices) keeps its own dtype. Shapes stay tiny, so interpreted or
reference runs take milliseconds.
"""

from __future__ import annotations

from typing import Any

import torch

from anna_core.kernels.contracts import OpExample

EPS = 1e-6


class _Gen:
    """Seeded random tensors built on the CPU (the same values on every device), then moved."""

    def __init__(self, seed: int, device: Any, dtype: torch.dtype):
        self.gen = torch.Generator().manual_seed(seed)
        self.device = torch.device(device)
        self.dtype = dtype

    def randn(self, *shape: int, dtype: torch.dtype | None = None, scale: float = 1.0) -> torch.Tensor:
        x = torch.randn(*shape, generator=self.gen) * scale
        return x.to(dtype or self.dtype).to(self.device)

    def rand(self, *shape: int, dtype: torch.dtype | None = None) -> torch.Tensor:
        return torch.rand(*shape, generator=self.gen).to(dtype or self.dtype).to(self.device)

    def ints(self, values: list[int] | list[list[int]], dtype: torch.dtype = torch.int64) -> torch.Tensor:
        return torch.tensor(values, dtype=dtype, device=self.device)

    def perm(self, k: int, dtype: torch.dtype = torch.int64) -> torch.Tensor:
        """A random permutation of ``range(k)``."""
        return torch.randperm(k, generator=self.gen).to(dtype).to(self.device)

    def l2(self, *shape: int) -> torch.Tensor:
        x = torch.randn(*shape, generator=self.gen)
        return (x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + 1e-6)).to(self.dtype).to(self.device)

    def inv_freq(self, rotated: int, base: float = 10000.0) -> torch.Tensor:
        return (1.0 / base ** (torch.arange(0, rotated, 2, dtype=torch.float32) / rotated)).to(self.device)


def _dt(dtype: Any) -> torch.dtype:
    return dtype if isinstance(dtype, torch.dtype) else getattr(torch, str(dtype).replace("torch.", ""))


def rms_norm(device: Any, dtype: Any) -> list[OpExample]:
    r = _Gen(1, device, _dt(dtype))
    return [OpExample((r.randn(3, 32), r.randn(32), EPS, zc)) for zc in (False, True)] + [
        OpExample((r.randn(2, 3, 48), r.randn(48), 1e-5, False))]


def gated_rms_norm(device: Any, dtype: Any) -> list[OpExample]:
    r = _Gen(2, device, _dt(dtype))
    return [OpExample((r.randn(3, 2, 16), r.randn(3, 2, 16), r.randn(16), EPS)),
            OpExample((r.randn(5, 32), r.randn(5, 32), r.randn(32), 1e-5))]


def add_rms_norm(device: Any, dtype: Any) -> list[OpExample]:
    r = _Gen(3, device, _dt(dtype))
    return [OpExample((r.randn(3, 32), r.randn(3, 32), r.randn(32), EPS, False)),
            OpExample((r.randn(4, 32), None, r.randn(32), EPS, True))]


def post_norm_residual(device: Any, dtype: Any) -> list[OpExample]:
    r = _Gen(4, device, _dt(dtype))
    return [OpExample((r.randn(3, 32), r.randn(3, 32), r.randn(32), EPS, False, None, r.randn(32))),
            OpExample((r.randn(4, 32), r.randn(4, 32), r.randn(32), EPS, True, r.rand(1) + 0.5, None))]


def dual_post_norm_residual(device: Any, dtype: Any) -> list[OpExample]:
    r = _Gen(5, device, _dt(dtype))
    return [OpExample((r.randn(3, 32), r.randn(32), r.randn(3, 32), r.randn(32), r.randn(3, 32), r.randn(32), EPS,
                       zc, r.rand(1) + 0.5 if zc else None, r.randn(32) if zc else None))
            for zc in (False, True)]


def rms_norm_pair(device: Any, dtype: Any) -> list[OpExample]:
    r = _Gen(6, device, _dt(dtype))
    return [OpExample((r.randn(3, 32), r.randn(32), EPS, zc, r.randn(32), 32 ** -0.5))
            for zc in (False, True)]


def post_norm_residual_norm_pair(device: Any, dtype: Any) -> list[OpExample]:
    r = _Gen(7, device, _dt(dtype))
    return [OpExample((r.randn(3, 32), r.randn(3, 32), r.randn(32), EPS, zc, r.randn(32), r.randn(32), r.randn(32),
                       32 ** -0.5)) for zc in (False, True)]


def silu_and_mul(device: Any, dtype: Any) -> list[OpExample]:
    r = _Gen(8, device, _dt(dtype))
    return [OpExample((r.randn(3, 64),)), OpExample((r.randn(2, 2, 48),))]


def sigmoid_mul(device: Any, dtype: Any) -> list[OpExample]:
    r = _Gen(9, device, _dt(dtype))
    wide = r.randn(4, 64)
    return [OpExample((r.randn(3, 32), r.randn(3, 32))), OpExample((r.randn(4, 32), wide[:, 32:]))]  # strided gate


def causal_conv1d_prefill(device: Any, dtype: Any) -> list[OpExample]:
    r = _Gen(10, device, _dt(dtype))
    lens = [5, 2, 7]  # a sequence shorter than the kernel's W-1 = 3 inputs of state
    cu = r.ints([0, 5, 7, 14], torch.int32)
    states = r.randn(5, 24, 3)
    states[3].zero_()  # a fresh slot
    return [OpExample((r.randn(sum(lens), 24), r.randn(24, 4), r.randn(24), cu, states, r.ints([3, 0, 4]), "silu")),
            OpExample((r.randn(4, 16), r.randn(16, 4), None, r.ints([0, 4], torch.int32), r.randn(2, 16, 3),
                       r.ints([1]), None))]


def causal_conv1d_update(device: Any, dtype: Any) -> list[OpExample]:
    r = _Gen(11, device, _dt(dtype))
    return [OpExample((r.randn(3, 24), r.randn(24, 4), r.randn(24), r.randn(5, 24, 3), r.ints([4, 0, 2]), "silu")),
            OpExample((r.randn(2, 16), r.randn(16, 4), None, r.randn(3, 16, 3), r.ints([1, 2]), None))]


def _gdr_inputs(r: _Gen, rows: int, h_k: int, h_v: int, d_k: int, d_v: int) -> tuple[torch.Tensor, ...]:
    q, k = r.l2(rows, h_k, d_k), r.l2(rows, h_k, d_k)
    v = r.randn(rows, h_v, d_v)
    g = -torch.rand(rows, h_v, generator=r.gen).mul(0.5).to(r.device)  # float32 log decay <= 0
    beta = r.rand(rows, h_v)
    return q, k, v, g, beta


def gated_delta_rule_prefill(device: Any, dtype: Any) -> list[OpExample]:
    r = _Gen(12, device, _dt(dtype))
    lens = [70, 5]  # one sequence over a 64-token chunk boundary
    q, k, v, g, beta = _gdr_inputs(r, sum(lens), 1, 2, 16, 16)
    states = r.randn(3, 2, 16, 16, dtype=torch.float32, scale=0.1)
    states[2].zero_()
    cu = r.ints([0, 70, 75], torch.int32)
    return [OpExample((q, k, v, g, beta, cu, states, r.ints([2, 0]), 16 ** -0.5))]


def gated_delta_rule_decode(device: Any, dtype: Any) -> list[OpExample]:
    r = _Gen(13, device, _dt(dtype))
    q, k, v, g, beta = _gdr_inputs(r, 3, 1, 2, 16, 32)
    states = r.randn(4, 2, 16, 32, dtype=torch.float32, scale=0.1)
    return [OpExample((q, k, v, g, beta, states, r.ints([3, 0, 1]), 16 ** -0.5))]


def reshape_and_cache(device: Any, dtype: Any) -> list[OpExample]:
    r = _Gen(14, device, _dt(dtype))
    return [OpExample((r.randn(5, 2, 16), r.randn(5, 2, 16), r.randn(6, 4, 2, 16), r.randn(6, 4, 2, 16),
                       r.ints([0, 1, 2, 9, 22])))]


def _paged(r: _Gen, q_lens: list[int], seq_lens: list[int], h_q: int, h_kv: int, d: int, block: int = 4):
    blocks_per_seq = [(n + block - 1) // block for n in seq_lens]
    width = max(blocks_per_seq)
    total = sum(blocks_per_seq) + 1
    order = torch.randperm(total, generator=r.gen).tolist()  # tables over scattered blocks
    tables, at = [], 0
    for n in blocks_per_seq:
        tables.append(order[at:at + n] + [0] * (width - n))
        at += n
    cu = [0]
    for n in q_lens:
        cu.append(cu[-1] + n)
    return (r.randn(sum(q_lens), h_q, d), r.randn(total, block, h_kv, d), r.randn(total, block, h_kv, d),
            r.ints(cu, torch.int32), r.ints(seq_lens, torch.int32), r.ints(tables, torch.int32))


def paged_attention(device: Any, dtype: Any) -> list[OpExample]:
    r = _Gen(15, device, _dt(dtype))
    mixed = _paged(r, [6, 1, 3], [6, 11, 9], 4, 2, 16)  # a fresh prompt, a decode, a chunk over a cached prefix
    decode = _paged(r, [1, 1], [7, 13], 2, 1, 32)
    return [OpExample((*mixed, 16 ** -0.5, None), shape={"head_dim": 16}),
            OpExample((*mixed, 16 ** -0.5, 4), shape={"head_dim": 16}),
            OpExample((*decode, 32 ** -0.5, None), shape={"head_dim": 32})]


def _turboquant_tables(bits: int, d: int, device: Any, key_qjl: bool = True) -> tuple:
    from anna_core.kv_quant.layout import TurboQuantLayout
    from anna_core.kv_quant.tables import TurboQuantTables

    layout = TurboQuantLayout(bits, key_qjl=key_qjl)
    return layout, TurboQuantTables.build(layout, d, device).args


def _turboquant_cache(r: _Gen, bits: int, d: int, n_blocks: int, block: int, h_kv: int, key_qjl: bool = True) -> tuple:
    """Quantized caches filled with the reference's rows of random K/V, and the tables."""
    from anna_core.kernels.reference.turboquant import turboquant_cache_write

    layout, tables = _turboquant_tables(bits, d, r.device, key_qjl)
    k_cache = torch.zeros(n_blocks, block, h_kv, layout.key_row_bytes(d), dtype=torch.uint8, device=r.device)
    v_cache = torch.zeros(n_blocks, block, h_kv, layout.value_row_bytes(d), dtype=torch.uint8, device=r.device)
    n = n_blocks * block
    turboquant_cache_write(r.randn(n, h_kv, d), r.randn(n, h_kv, d), k_cache, v_cache,
                           torch.arange(n, device=r.device), *tables)
    return k_cache, v_cache, tables


def turboquant_cache_write(device: Any, dtype: Any) -> list[OpExample]:
    r = _Gen(31, device, _dt(dtype))
    out = []
    for bits, d, key_qjl in ((4, 16, True), (3, 32, True), (2, 16, True), (3, 16, False)):  # last: keys as values
        layout, tables = _turboquant_tables(bits, d, r.device, key_qjl)
        k_cache = torch.zeros(6, 4, 2, layout.key_row_bytes(d), dtype=torch.uint8, device=r.device)
        v_cache = torch.zeros(6, 4, 2, layout.value_row_bytes(d), dtype=torch.uint8, device=r.device)
        out.append(OpExample((r.randn(5, 2, d), r.randn(5, 2, d), k_cache, v_cache, r.ints([0, 1, 2, 9, 22]),
                              *tables)))
    return out


def paged_attention_turboquant(device: Any, dtype: Any) -> list[OpExample]:
    r = _Gen(32, device, _dt(dtype))
    out = []
    for bits, q_lens, seq_lens, h_q, h_kv, d, window, key_qjl in (
            (4, [6, 1, 3], [6, 11, 9], 4, 2, 16, None, True),  # a fresh prompt, a decode, a chunk over a cached prefix
            (3, [6, 1, 3], [6, 11, 9], 4, 2, 16, 4, True),
            (2, [1, 1], [7, 13], 2, 1, 32, None, True),
            (4, [6, 1, 3], [6, 11, 9], 4, 2, 16, None, False)):  # keys quantized as values
        q, k, _, cu, lens, tables = _paged(r, q_lens, seq_lens, h_q, h_kv, d)
        k_cache, v_cache, tq = _turboquant_cache(r, bits, d, k.shape[0], k.shape[1], h_kv, key_qjl)
        out.append(OpExample((q, k_cache, v_cache, cu, lens, tables, d ** -0.5, window, *tq), shape={"head_dim": d}))
    # a residual ring of 4 positions: sequence 0 (slot 2) holds all of its newest, sequence 1 (slot 0) two of them
    # and a stale position, sequence 2 (slot 1) only an earlier owner's
    q, k, _, cu, lens, tables = _paged(r, [6, 1, 3], [6, 11, 9], 4, 2, 16)
    k_cache, v_cache, tq = _turboquant_cache(r, 4, 16, k.shape[0], k.shape[1], 2)
    pos = r.ints([[8, 9, 10, 3], [12, 13, 14, 15], [4, 5, 2, 3], [-1, -1, -1, -1]], torch.int32)
    ring = (r.randn(4, 4, 2, 16), r.randn(4, 4, 2, 16), pos, r.ints([2, 0, 1]))
    out.append(OpExample((q, k_cache, v_cache, cu, lens, tables, 16 ** -0.5, None, *tq, *ring), shape={"head_dim": 16}))
    return out


def linear(device: Any, dtype: Any) -> list[OpExample]:
    r = _Gen(16, device, _dt(dtype))
    return [OpExample((r.randn(1, 64), r.randn(24, 64, scale=0.2), None)),
            OpExample((r.randn(3, 64), r.randn(40, 64, scale=0.2), r.randn(40))),
            OpExample((r.randn(12, 32), r.randn(16, 32, scale=0.2), None))]  # beyond a decode GEMV's rows


def int4_linear(device: Any, dtype: Any) -> list[OpExample]:
    """Codes packed in the CPU's int4 layout (``aten::_convert_weight_to_int4pack_for_cpu``): no examples on another
    device type, whose packed layout differs."""
    r = _Gen(28, device, _dt(dtype))
    if r.device.type != "cpu":
        return []
    out = []
    for m, n, k, g in ((1, 16, 64, 32), (3, 32, 128, 64)):
        codes = torch.randint(0, 16, (n, k), generator=r.gen, dtype=torch.int32)
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 1)
        scale_zero = torch.stack([torch.rand(k // g, n, generator=r.gen) * 0.05,
                                  torch.randn(k // g, n, generator=r.gen) * 0.01], dim=-1).to(r.dtype)
        out.append(OpExample((r.randn(m, k), packed, scale_zero.contiguous(), g)))
    return out


def _wq(r: _Gen, n: int, k: int, scheme: str) -> tuple:
    """A random ``[N, K]`` weight quantized with ``scheme`` (scales in the activation dtype for int4)."""
    from anna_core.weights.gpu_quant import quantize

    q = quantize(torch.randn(n, k, generator=r.gen) * 0.2, scheme, r.dtype)
    return tuple(t.to(r.device) if t is not None else None for t in (q.qweight, q.scale, q.zero)) + (scheme,)


def wq_linear(device: Any, dtype: Any) -> list[OpExample]:
    """Each scheme at one and three rows (a decode GEMV) and at 12 rows; a bias; FP8 with partial blocks; an int4
    weight with its columns stored in a permuted order (act-order GPTQ: int64 and int32 ``perm``)."""
    r = _Gen(32, device, _dt(dtype))
    out = []
    for scheme in ("int4", "int8", "fp8"):
        out.append(OpExample((r.randn(1, 256), *_wq(r, 24, 256, scheme), None), shape={"scheme": scheme}))
        out.append(OpExample((r.randn(3, 128), *_wq(r, 40, 128, scheme), r.randn(40)), shape={"scheme": scheme}))
        out.append(OpExample((r.randn(12, 128), *_wq(r, 16, 128, scheme), None), shape={"scheme": scheme}))
    out.append(OpExample((r.randn(2, 160), *_wq(r, 136, 160, "fp8"), None), shape={"scheme": "fp8"}))
    out.append(OpExample((r.randn(2, 96), *_wq(r, 20, 96, "int8"), None), shape={"scheme": "int8"}))
    out.append(OpExample((r.randn(1, 256), *_wq(r, 24, 256, "int4"), None, r.perm(256)), shape={"scheme": "int4"}))
    out.append(OpExample((r.randn(12, 256), *_wq(r, 16, 256, "int4"), r.randn(16), r.perm(256, torch.int32)),
                         shape={"scheme": "int4"}))
    return out


def _dyadic(r: _Gen, *shape: int, scale: float, lo: int = -4, hi: int = 4) -> torch.Tensor:
    """Random integers in ``[lo, hi]`` times a power of two ``scale`` (float32, on the CPU): exact in every float
    dtype, and their sums of products exact in float32 in any order."""
    return torch.randint(lo, hi + 1, shape, generator=r.gen).float() * scale


def _exact_head(r: _Gen, n: int, k: int, scheme: str) -> tuple:
    """A ``[N, K]`` head whose logits every implementation computes exactly (dyadic codes, scales and zeros), so
    implementations agree on every rounding, tie and index: ``(weight, scale, zero, scheme)`` on the device."""
    from anna_core.weights.gpu_quant import FP8_BLOCK, INT4_GROUP

    def on(*tensors):
        return tuple(t.to(r.device) if t is not None else None for t in tensors)

    if scheme == "none":
        w = _dyadic(r, n, k, scale=0.125)
        w[n - 3] = w[5]  # equal logits at ids 5 and n - 3
        return (*on(w.to(r.dtype), None, None), scheme)
    if scheme == "int4":
        q = torch.randint(0, 256, (n, k // 2), generator=r.gen).to(torch.uint8)
        groups = (n, k // INT4_GROUP)
        scale = torch.full(groups, 2.0**-4).to(r.dtype)
        return (*on(q, scale, torch.full(groups, -0.5).to(r.dtype)), scheme)
    if scheme == "int8":
        q = torch.randint(-127, 128, (n, k), generator=r.gen).to(torch.int8)
        return (*on(q, 2.0 ** -torch.randint(7, 9, (n,), generator=r.gen).float(), None), scheme)
    q = _dyadic(r, n, k, scale=1.0, lo=-16, hi=16).to(torch.float8_e4m3fn)
    blocks = (-(-n // FP8_BLOCK), -(-k // FP8_BLOCK))
    return (*on(q, torch.full(blocks, 2.0**-6), None), scheme)


def lm_head_topk(device: Any, dtype: Any) -> list[OpExample]:
    """A dense head and each quantized layout at one and three rows; k of 1, 5 and 64; a soft-cap; a vocabulary
    that is no multiple of a kernel's tile. Exact arithmetic (dyadic values, :func:`_exact_head`), so every
    implementation rounds the logits alike and the many equal logits (two equal weight rows; bfloat16 rounding)
    must come out the lower id first."""
    r = _Gen(35, device, _dt(dtype))
    out = []
    dense = _exact_head(r, 300, 128, "none")
    for rows, k, cap in ((1, 64, None), (3, 5, 10.0), (2, 1, None)):
        x = _dyadic(r, rows, 128, scale=0.125).to(r.dtype).to(r.device)
        out.append(OpExample((x, *dense, k, cap), shape={"scheme": "none"}))
    for scheme in ("int4", "int8", "fp8"):
        head = _exact_head(r, 200, 256, scheme)
        for rows, k, cap in ((1, 1, None), (3, 64, 10.0)):
            x = _dyadic(r, rows, 256, scale=0.125).to(r.dtype).to(r.device)
            out.append(OpExample((x, *head, k, cap), shape={"scheme": scheme}))
    return out


def add_rms_norm_wq_linear(device: Any, dtype: Any) -> list[OpExample]:
    """Each scheme, with and without a residual, plain and with each gated product; int4 with a permuted column
    order (act-order GPTQ), with and without a residual."""
    r = _Gen(33, device, _dt(dtype))
    out = []
    for scheme in ("int4", "int8", "fp8"):
        out.append(OpExample((r.randn(1, 128), r.randn(1, 128), r.randn(128), EPS, True, *_wq(r, 24, 128, scheme)),
                             shape={"scheme": scheme}))
        out.append(OpExample((r.randn(2, 256), None, r.randn(256), EPS, False, *_wq(r, 48, 256, scheme), "silu"),
                             shape={"scheme": scheme}))
        out.append(OpExample((r.randn(3, 128), r.randn(3, 128), r.randn(128), EPS, True, *_wq(r, 32, 128, scheme),
                              "gelu_tanh"), shape={"scheme": scheme}))
    # act-order int4: the input columns stored in a permuted order
    out.append(OpExample((r.randn(1, 256), r.randn(1, 256), r.randn(256), EPS, True, *_wq(r, 24, 256, "int4"), None,
                          r.perm(256, torch.int32)), shape={"scheme": "int4"}))
    out.append(OpExample((r.randn(2, 256), None, r.randn(256), EPS, False, *_wq(r, 48, 256, "int4"), "silu",
                          r.perm(256)), shape={"scheme": "int4"}))
    return out


def add_rms_norm_linear(device: Any, dtype: Any) -> list[OpExample]:
    r = _Gen(17, device, _dt(dtype))
    return [OpExample((r.randn(2, 64), r.randn(2, 64), r.randn(64), EPS, False, r.randn(24, 64, scale=0.2))),
            OpExample((r.randn(3, 64), None, r.randn(64), EPS, True, r.randn(40, 64, scale=0.2)))]


def act_mul_linear(device: Any, dtype: Any) -> list[OpExample]:
    r = _Gen(18, device, _dt(dtype))
    return [OpExample((r.randn(2, 64), r.randn(24, 32, scale=0.2), act)) for act in ("silu", "gelu_tanh")]


def gated_linear(device: Any, dtype: Any) -> list[OpExample]:
    r = _Gen(19, device, _dt(dtype))
    up_wide = r.randn(3, 64)
    return [OpExample((r.randn(2, 32), r.randn(2, 32), r.randn(24, 32, scale=0.2), "silu")),
            OpExample((r.randn(3, 32), up_wide[:, 32:], r.randn(16, 32, scale=0.2), "gelu_tanh"))]


def linear_act_mul(device: Any, dtype: Any) -> list[OpExample]:
    r = _Gen(20, device, _dt(dtype))
    return [OpExample((r.randn(2, 32), r.randn(48, 32, scale=0.2), act)) for act in ("silu", "gelu_tanh")]


def add_rms_norm_linear_act_mul(device: Any, dtype: Any) -> list[OpExample]:
    r = _Gen(21, device, _dt(dtype))
    return [OpExample((r.randn(2, 32), r.randn(2, 32), r.randn(32), EPS, False, r.randn(48, 32, scale=0.2), "silu")),
            OpExample((r.randn(3, 32), None, r.randn(32), EPS, True, r.randn(32, 32, scale=0.2), "gelu_tanh"))]



def post_norm_residual_linear(device: Any, dtype: Any) -> list[OpExample]:
    r = _Gen(31, device, _dt(dtype))
    x, res = r.randn(1, 32), r.randn(1, 32)
    return [OpExample((x, res, r.randn(32), EPS, False, None, r.randn(32), r.randn(24, 32, scale=0.2))),
            OpExample((x, res, r.randn(32), EPS, False, r.randn(1), None, r.randn(16, 32, scale=0.2))),
            OpExample((r.randn(3, 32), r.randn(3, 32), r.randn(32), EPS, True, r.randn(1), r.randn(32),
                       r.randn(48, 32, scale=0.2), "gelu_tanh"))]

def moe_route(device: Any, dtype: Any) -> list[OpExample]:
    r = _Gen(22, device, _dt(dtype))
    # well-separated logits: no two probabilities within a few ulps, so every implementation picks the same ids
    logits = (torch.randperm(8 * 5, generator=r.gen).reshape(5, 8).float() * 0.25).to(r.dtype).to(r.device)
    return [OpExample((logits, 2, None, r.dtype), shape={"num_experts": 8}),
            OpExample((logits, 3, r.rand(8) + 0.5, torch.float32), shape={"num_experts": 8})]


def moe_experts(device: Any, dtype: Any) -> list[OpExample]:
    r = _Gen(23, device, _dt(dtype))
    e, h, i = 4, 32, 16
    gate_up, down = r.randn(e, 2 * i, h, scale=0.2), r.randn(e, h, i, scale=0.2)
    ids = r.ints([[0, 2], [3, 0], [1, 2], [2, 3], [0, 1]])
    weights = torch.softmax(torch.randn(5, 2, generator=r.gen), -1).to(r.device)
    one = r.ints([[3, 1]], torch.int32)
    return [OpExample((r.randn(5, h), gate_up, down, weights, ids, "silu")),
            OpExample((r.randn(1, h), gate_up, down, weights[:1].to(r.dtype), one, "gelu_tanh"))]


def _wq_stacked(r: _Gen, e: int, n: int, k: int, scheme: str) -> tuple:
    """Random ``[E, N, K]`` weights quantized with ``scheme``: ``(qweight, scale, zero)`` stacked over ``E``."""
    from anna_core.weights.gpu_quant import quantize_stacked

    q = quantize_stacked(torch.randn(e, n, k, generator=r.gen) * 0.2, scheme, r.dtype)
    return tuple(t.to(r.device) if t is not None else None for t in (q.qweight, q.scale, q.zero))


def moe_experts_wq(device: Any, dtype: Any) -> list[OpExample]:
    """Each scheme: five tokens at top-2 of 4 experts and one token at top-3; int8 and fp8 at an intermediate
    width that is not a multiple of 128 (fp8: partial scale blocks; int4 needs multiples of 128)."""
    r = _Gen(34, device, _dt(dtype))
    e, h = 4, 128
    out = []
    for scheme, inter in (("int4", 128), ("int8", 40), ("fp8", 72)):
        args = (*_wq_stacked(r, e, 2 * inter, h, scheme), *_wq_stacked(r, e, h, inter, scheme))
        weights = torch.softmax(torch.randn(5, 2, generator=r.gen), -1).to(r.device)
        ids = r.ints([[0, 2], [3, 0], [1, 2], [2, 3], [0, 1]])
        out.append(OpExample((r.randn(5, h), *args, weights, ids, "silu", scheme), shape={"scheme": scheme}))
        one = torch.softmax(torch.randn(1, 3, generator=r.gen), -1).to(r.dtype).to(r.device)
        out.append(OpExample((r.randn(1, h), *args, one, r.ints([[3, 1, 0]], torch.int32), "gelu_tanh", scheme),
                             shape={"scheme": scheme}))
    return out


def qk_norm_rope_cache(device: Any, dtype: Any) -> list[OpExample]:
    r = _Gen(24, device, _dt(dtype))
    d = 32
    out = []
    for rotated, zc in ((d, False), (d // 2, True)):  # whole and partial rotary
        out.append(OpExample((r.randn(5, 4, d), r.randn(5, 2, d), r.randn(5, 2, d), r.randn(d), r.randn(d), EPS, zc,
                              r.ints([0, 1, 2, 7, 30]), r.inv_freq(rotated), r.randn(3, 4, 2, d),
                              r.randn(3, 4, 2, d), r.ints([0, 1, 2, 7, 11])), shape={"head_dim": d}))
    # M-RoPE: three position rows that differ (an image's t / h / w); each frequency's row as
    # layers.rotary.mrope_axis_of_frequency gives it for mrope_section [4, 2, 2] and [6, 5, 5], interleaved (Qwen3.5)
    for rotated, axis in ((d // 2, [0, 1, 2, 0, 1, 2, 0, 0]), (d, [0, 1, 2] * 5 + [0])):
        axis = r.ints(axis)
        out.append(OpExample((r.randn(5, 4, d), r.randn(5, 2, d), r.randn(5, 2, d), r.randn(d), r.randn(d), EPS, True,
                              r.ints([[4, 5, 5, 5, 9], [4, 5, 5, 6, 9], [4, 5, 6, 5, 9]]), r.inv_freq(rotated),
                              r.randn(3, 4, 2, d), r.randn(3, 4, 2, d), r.ints([0, 1, 2, 7, 11]), axis),
                             shape={"head_dim": d, "position_rows": 3}))
    return out


def qkv_norm_rope_cache(device: Any, dtype: Any) -> list[OpExample]:
    r = _Gen(27, device, _dt(dtype))
    d = 32
    out = []
    for rotated, zc in ((d, False), (d // 2, True)):  # whole and partial rotary
        k = r.randn(5, 2, d)
        v = r.randn(5, 2, d) if zc else k  # k_eq_v: v is k's rows
        out.append(OpExample((r.randn(5, 4, d), k, v, r.randn(d), r.randn(d), EPS, zc, r.ints([0, 1, 2, 7, 30]),
                              r.inv_freq(rotated), r.randn(3, 4, 2, d), r.randn(3, 4, 2, d), r.ints([0, 1, 2, 7, 11])),
                             shape={"head_dim": d}))
    return out


def q_norm_rope(device: Any, dtype: Any) -> list[OpExample]:
    r = _Gen(25, device, _dt(dtype))
    return [OpExample((r.randn(4, 2, 32), r.randn(32), EPS, zc, r.ints([0, 3, 4, 19]), r.inv_freq(rotated)),
                      shape={"head_dim": 32}) for rotated, zc in ((32, False), (16, True))]


def q_norm_rope_attention(device: Any, dtype: Any) -> list[OpExample]:
    r = _Gen(28, device, _dt(dtype))
    out = []
    cases = [([1, 1], [7, 13], None, 32, False),  # decodes, whole rotary
             ([6, 1, 3], [6, 11, 9], 4, 16, True)]  # a prompt, a decode, a chunk; window; partial rotary
    for q_lens, ctx, window, rotated, zc in cases:
        q, k_cache, v_cache, cu, seq_lens, tables = _paged(r, q_lens, ctx, 4, 2, 32)
        positions = torch.cat([torch.arange(c - n, c) for n, c in zip(q_lens, ctx, strict=True)]).to(r.device)
        out.append(OpExample((q, r.randn(32), EPS, zc, positions, r.inv_freq(rotated), k_cache, v_cache, cu, seq_lens,
                              tables, 32 ** -0.5, window), shape={"head_dim": 32}))
    return out


def qkv_norm_rope_cache_attention(device: Any, dtype: Any) -> list[OpExample]:
    r = _Gen(29, device, _dt(dtype))
    out = []
    cases = [([1, 1], [7, 13], None, 32, False, False),  # decodes, whole rotary
             ([6, 1, 3], [6, 11, 9], 4, 16, True, True)]  # a prompt, a decode, a chunk; window; partial; k_eq_v
    for q_lens, ctx, window, rotated, zc, k_eq_v in cases:
        q, k_cache, v_cache, cu, seq_lens, tables = _paged(r, q_lens, ctx, 4, 2, 32)
        positions = torch.cat([torch.arange(c - n, c) for n, c in zip(q_lens, ctx, strict=True)]).to(r.device)
        rows = tables.cpu()[torch.repeat_interleave(torch.arange(len(q_lens)), torch.tensor(q_lens))]
        slots = (rows.gather(1, (positions.cpu() // 4)[:, None])[:, 0].long() * 4 + positions.cpu() % 4).to(r.device)
        k = r.randn(q.shape[0], 2, 32)
        v = k if k_eq_v else r.randn(q.shape[0], 2, 32)
        out.append(OpExample((q, k, v, r.randn(32), r.randn(32), EPS, zc, positions, r.inv_freq(rotated), k_cache,
                              v_cache, slots, cu, seq_lens, tables, 32 ** -0.5, window), shape={"head_dim": 32}))
    return out


def _gdn_gates(r: _Gen, rows: int, h_v: int) -> tuple[torch.Tensor, ...]:
    wide = r.randn(rows, 2 * h_v + 1)  # a, b: strided column views of one projection
    neg_a = -torch.rand(h_v, generator=r.gen).add(0.5).to(r.device)
    return wide[:, :h_v], wide[:, h_v:2 * h_v], neg_a, r.randn(h_v)


def fused_gdn_decode(device: Any, dtype: Any) -> list[OpExample]:
    r = _Gen(26, device, _dt(dtype))
    h_k, h_v, d_k, d_v, batch = 1, 2, 16, 16, 3
    channels = 2 * h_k * d_k + h_v * d_v
    a, b, neg_a, dt_bias = _gdn_gates(r, batch, h_v)
    return [OpExample((r.randn(batch, channels), r.randn(channels, 4), r.randn(4, channels, 3), r.randn(batch, h_v * d_v),
                       a, b, neg_a, dt_bias, r.randn(d_v), EPS, r.randn(4, h_v, d_k, d_v, dtype=torch.float32, scale=0.1),
                       r.ints([2, 0, 3]), d_k ** -0.5, h_k), shape={"head_k_dim": d_k, "head_v_dim": d_v})]


def fused_gdn_prefill(device: Any, dtype: Any) -> list[OpExample]:
    r = _Gen(27, device, _dt(dtype))
    h_k, h_v, d_k, d_v = 1, 2, 16, 16
    lens = [6, 3]
    rows = sum(lens)
    a, b, neg_a, dt_bias = _gdn_gates(r, rows, h_v)
    return [OpExample((r.randn(rows, 2 * h_k * d_k + h_v * d_v), a, b, neg_a, dt_bias, r.ints([0, 6, 9], torch.int32),
                       r.randn(3, h_v, d_k, d_v, dtype=torch.float32, scale=0.1), r.ints([1, 2]), d_k ** -0.5, h_k, d_k,
                       d_v), shape={"head_k_dim": d_k, "head_v_dim": d_v})]
