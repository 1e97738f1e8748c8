"""GGUF weights kept quantized: affine blocks, the ``int4_linear`` packing and the quantized layers.

Each GGUF type's tiny tensor comes from the ``gguf`` library's own quantizer where it has one (``Q4_0``,
``Q4_1``, ``Q5_0``, ``Q5_1``, ``Q8_0``) and from random stored blocks otherwise (it has none for the
K-quants); the reference is ``gguf.quants.dequantize``.

Bounds, measured on these tensors and stated as the format's rounding: the decoded blocks equal
gguf's dequantized values exactly; through the kernel in float32 the product is within ``1e-5`` of
``|x| |w|^T`` (float32 accumulation; measured <= 2e-7); in bfloat16 (x, scales and the result rounded
to bfloat16, 3 roundings of ``2**-9``) within ``3 * 2**-9`` (measured <= 1.1e-3).
"""

import numpy as np
import pytest
import torch
from anna_core.kernels.reference.int4_linear import check_int4_linear, int4_linear, pack_affine_blocks
from anna_core.layers.linear import merge_linears
from anna_core.layers.quant_linear import QuantizedEmbedding, QuantizedLinear
from anna_core.weights.gguf_blocks import AFFINE_TYPES, AffineBlocks, affine_blocks

gguf = pytest.importorskip("gguf")
T = gguf.GGMLQuantizationType

QUANTIZABLE = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0")  # gguf.quants.quantize implements these
F16_FIELDS = {"Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208]}
N, K = 40, 512
BF16_BOUND = 3 * 2**-9
F32_BOUND = 1e-5


def stored(name: str, rows: int = N, cols: int = K, seed: int = 0) -> np.ndarray:
    """``[rows, bytes]`` stored GGUF data of type ``name``: gguf's quantizer where it has one."""
    rng = np.random.default_rng(seed)
    if name in QUANTIZABLE:
        return gguf.quants.quantize(rng.standard_normal((rows, cols)).astype(np.float32), T[name])
    block, nbytes = gguf.GGML_QUANT_SIZES[T[name]]
    data = rng.integers(0, 256, size=(rows * cols // block, nbytes), dtype=np.uint8)
    for off in F16_FIELDS[name]:
        data[:, off:off + 2] = rng.uniform(-1, 1, size=data.shape[0]).astype(np.float16).view(np.uint8).reshape(-1, 2)
    return data.reshape(rows, -1)


def through_kernel(blocks: AffineBlocks, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    p = pack_affine_blocks(blocks, dtype)
    h = p.expand(x.to(dtype))
    return int4_linear(h, p.packed, p.scale_zero, p.group)[:, : p.out_features].float()


def test_every_issue_type_has_a_packed_form():
    assert {"Q4_0", "Q4_1", "Q4_K", "Q5_0", "Q5_K", "Q6_K", "Q8_0"} <= set(AFFINE_TYPES)


@pytest.mark.parametrize("name", QUANTIZABLE + tuple(F16_FIELDS))
def test_each_type_through_the_kernel_is_its_dequantized_product(name):
    raw = stored(name)
    ref = torch.from_numpy(gguf.quants.dequantize(raw, T[name]))  # [N, K] float32
    blocks = affine_blocks(raw, T[name], (N, K))
    assert torch.equal(blocks.dequantize(), ref)  # the representation is exact
    x = torch.randn(3, K, generator=torch.Generator().manual_seed(1))
    want = x @ ref.t()
    scale = x.abs() @ ref.abs().t()  # |x| |w|^T: what the rounding is relative to
    assert scale.min() > 0
    for dtype, bound in ((torch.float32, F32_BOUND), (torch.bfloat16, BF16_BOUND)):
        err = ((through_kernel(blocks, x, dtype) - want).abs() / scale).max().item()
        assert err <= bound, (name, dtype, err)


def test_wider_codes_use_two_planes_and_q6_k_pads_to_groups_of_32():
    q4 = pack_affine_blocks(affine_blocks(stored("Q4_1"), T.Q4_1, (N, K)))
    q8 = pack_affine_blocks(affine_blocks(stored("Q8_0"), T.Q8_0, (N, K)))
    q6 = pack_affine_blocks(affine_blocks(stored("Q6_K"), T.Q6_K, (N, K)))
    rows = 48  # N = 40 rows padded to a multiple of 16 (the kernel's)
    x = torch.arange(K, dtype=torch.float32)[None] + 1
    assert q4.planes == 1 and tuple(q4.packed.shape) == (rows, K // 2) and q4.group == 32 and q4.expand(x) is x
    assert q4.out_features == N
    assert tuple(q8.packed.shape) == (rows, K) and q8.planes == 2  # two 4-bit planes
    assert torch.equal(q8.expand(x)[0, :64], torch.cat([x[0, :32], x[0, :32]]))  # each group once per plane
    assert tuple(q6.packed.shape) == (rows, 2 * K)
    assert torch.equal(q6.expand(x)[0, :64], torch.cat([x[0, :16], torch.zeros(16)] * 2))  # 16 padded to 32
    assert q4.scale_zero.dtype == torch.bfloat16 and tuple(q4.scale_zero.shape) == (K // 32, rows, 2)


def test_merging_blocks_of_different_types_is_exact():
    a = affine_blocks(stored("Q4_0", rows=8, cols=256), T.Q4_0, (8, 256))
    b = affine_blocks(stored("Q6_K", rows=4, cols=256, seed=2), T.Q6_K, (4, 256))
    merged = AffineBlocks.cat([a, b])
    assert merged.group == 16 and merged.bits == 6 and merged.shape == (12, 256)
    assert torch.equal(merged.dequantize(), torch.cat([a.dequantize(), b.dequantize()]))


def test_quantized_linear_merges_and_keeps_no_float_weight():
    parts = [QuantizedLinear(affine_blocks(stored(t, rows=r, seed=i), T[t], (r, K)), compute_dtype=torch.float32)
             for i, (t, r) in enumerate((("Q4_1", 16), ("Q4_1", 8), ("Q8_0", 8)))]
    dense = torch.cat([p.blocks.dequantize() for p in parts])
    merged = merge_linears(parts)
    assert isinstance(merged, QuantizedLinear) and (merged.out_features, merged.in_features) == (32, K)
    x = torch.randn(2, 5, K, generator=torch.Generator().manual_seed(3))
    y = merged(x)  # packs on first use
    assert merged.blocks is None and not list(merged.parameters())
    assert all(b.dtype in (torch.uint8, torch.float32, torch.int64) for b in merged.buffers())
    assert y.shape == (2, 5, 32)
    torch.testing.assert_close(y, x @ dense.t(), rtol=0, atol=F32_BOUND * (x.abs() @ dense.abs().t()).max().item())


def test_mixed_dense_and_quantized_parts_merge_dense():
    q = QuantizedLinear(affine_blocks(stored("Q4_0", rows=8), T.Q4_0, (8, K)))
    d = torch.nn.Linear(K, 4, bias=False)
    merged = merge_linears([q, d])
    assert type(merged) is torch.nn.Linear
    assert torch.equal(merged.weight[:8], q.blocks.dequantize()) and torch.equal(merged.weight[8:], d.weight)


def test_quantized_embedding_dequantizes_only_looked_up_rows_exactly():
    raw = stored("Q8_0", rows=50, cols=64)
    table = torch.from_numpy(gguf.quants.dequantize(raw, T.Q8_0))
    emb = QuantizedEmbedding(torch.from_numpy(raw.copy()), T.Q8_0, 64, torch.float32, tied_head=True)
    ids = torch.tensor([[3, 49, 0], [7, 7, 12]])
    assert torch.equal(emb(ids), table[ids])
    h = torch.randn(2, 64, generator=torch.Generator().manual_seed(4))
    logits = emb.logits(h)
    assert logits.shape == (2, 50) and logits.dtype == torch.float32
    torch.testing.assert_close(logits, h @ table.t(), rtol=1e-6, atol=1e-5)  # float32 logits: no bfloat16 ties
    with pytest.raises(ValueError, match="not a tied LM head"):
        QuantizedEmbedding(torch.from_numpy(raw.copy()), T.Q8_0, 64, torch.float32).logits(h)


def test_int4_linear_checks_its_arguments():
    p = pack_affine_blocks(affine_blocks(stored("Q4_0", rows=8, cols=64), T.Q4_0, (8, 64)))
    with pytest.raises(ValueError, match="int4_linear: group_size"):
        check_int4_linear(torch.zeros(1, 64, dtype=torch.bfloat16), p.packed, p.scale_zero, 16)
    with pytest.raises(ValueError, match="scale_zero .* must have x's dtype"):
        check_int4_linear(torch.zeros(1, 64), p.packed, p.scale_zero, 32)


def test_int8_head_equals_the_float32_table_head():
    """A tied Q8_0 head computed from its int8 codes (eagerly here; the runner compiles it) gives the float32
    table's logits within float32 rounding, frees the table and refuses other types."""
    import gguf
    from anna_core.layers.quant_linear import QuantizedEmbedding, use_int8_heads

    torch.manual_seed(0)
    table = torch.randn(40, 64) * 0.05
    raw = torch.from_numpy(gguf.quantize(table.numpy(), gguf.GGMLQuantizationType.Q8_0).copy())
    head = QuantizedEmbedding(raw, "Q8_0", 64, torch.float32, tied_head=True)
    hidden = torch.randn(3, 64) * 4
    expected = head.logits(hidden)
    root = torch.nn.Sequential(head)
    assert use_int8_heads(root, lambda fn: fn) == 1
    assert head.head_weight is None and head.head_codes.dtype == torch.int8 and head.head_codes.shape == (2, 32, 40)
    got = head.logits(hidden)
    assert got.dtype == torch.float32 and got.shape == (3, 40)
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-5)
    assert torch.equal(got.argmax(-1), expected.argmax(-1))
    q4 = torch.from_numpy(gguf.quantize(table.numpy(), gguf.GGMLQuantizationType.Q4_0).copy())
    with pytest.raises(ValueError, match="Q8_0 tables only"):
        QuantizedEmbedding(q4, "Q4_0", 64, torch.float32, tied_head=True).use_int8_head(lambda fn: fn)


def test_int8_head_keeps_the_float32_head_when_compiling_fails():
    import gguf
    from anna_core.layers.quant_linear import QuantizedEmbedding

    table = torch.randn(8, 32)
    raw = torch.from_numpy(gguf.quantize(table.numpy(), gguf.GGMLQuantizationType.Q8_0).copy())
    head = QuantizedEmbedding(raw, "Q8_0", 32, torch.float32, tied_head=True)
    hidden = torch.randn(1, 32)
    expected = head.logits(hidden)

    def broken(fn):
        def run(*args):
            raise RuntimeError("no compiler")
        return run

    with pytest.raises(RuntimeError, match="no compiler"):
        head.use_int8_head(broken)
    assert head.head_codes is None and torch.equal(head.logits(hidden), expected)
