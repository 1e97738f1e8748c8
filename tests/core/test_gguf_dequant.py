"""Anna's GGML dequantizers against the ``gguf`` library's own reference, on random blocks."""

import numpy as np
import pytest
import torch
from anna_core.errors import ModelLoadError
from anna_core.weights.dequant import SUPPORTED_TYPES, dequantize

gguf = pytest.importorskip("gguf")
T = gguf.GGMLQuantizationType

# Byte offsets of each block's float16 scale fields (set to finite values; random bits may be NaN/inf).
F16_FIELDS = {"Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
              "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208]}


def random_blocks(name: str, rows: int, blocks_per_row: int, rng: np.random.Generator) -> np.ndarray:
    _block, nbytes = gguf.GGML_QUANT_SIZES[T[name]]
    data = rng.integers(0, 256, size=(rows * blocks_per_row, nbytes), dtype=np.uint8)
    for off in F16_FIELDS[name]:
        scales = rng.uniform(-2.0, 2.0, size=data.shape[0]).astype(np.float16)
        data[:, off:off + 2] = scales.view(np.uint8).reshape(-1, 2)
    return data.reshape(rows, blocks_per_row * nbytes)


def test_every_required_type_is_supported():
    required = {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "F16", "BF16", "F32"}
    assert required <= set(SUPPORTED_TYPES)


@pytest.mark.parametrize("name", sorted(F16_FIELDS))
@pytest.mark.parametrize("seed", [0, 1])
def test_block_types_match_gguf_reference(name, seed):
    rng = np.random.default_rng(seed)
    raw = random_blocks(name, rows=5, blocks_per_row=3, rng=rng)
    ref = gguf.quants.dequantize(raw, T[name])  # [rows, values] float32
    got = dequantize(raw, T[name], ref.shape)
    assert got.dtype == torch.float32 and tuple(got.shape) == ref.shape
    assert np.isfinite(ref).all() and np.abs(ref).max() > 0
    np.testing.assert_array_equal(got.numpy(), ref)


@pytest.mark.parametrize("name", ["F32", "F16", "BF16"])
def test_plain_types_match_gguf_reference(name):
    rng = np.random.default_rng(3)
    values = rng.standard_normal((4, 64)).astype(np.float32)
    if name == "F32":
        raw = values
    elif name == "F16":
        raw = values.astype(np.float16)
    else:  # bfloat16: the top 16 bits of float32, stored as bytes (as GGUFReader hands them out)
        raw = (values.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8).reshape(4, 128)
    ref = gguf.quants.dequantize(raw, T[name]).astype(np.float32)
    got = dequantize(raw, T[name], (4, 64))
    np.testing.assert_array_equal(got.numpy(), ref)


def test_output_dtype_and_torch_input():
    raw = random_blocks("Q8_0", rows=2, blocks_per_row=2, rng=np.random.default_rng(4))
    ref = gguf.quants.dequantize(raw, T.Q8_0)
    got = dequantize(torch.from_numpy(raw), "Q8_0", ref.shape, dtype=torch.bfloat16)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, torch.from_numpy(ref).to(torch.bfloat16))


def test_bad_inputs_raise_clear_errors():
    raw = random_blocks("Q4_0", rows=1, blocks_per_row=2, rng=np.random.default_rng(5))
    with pytest.raises(ModelLoadError, match="needs 36 bytes, got 18"):
        dequantize(raw[:, :18], "Q4_0", (1, 64))
    with pytest.raises(ModelLoadError, match="multiple of 32"):
        dequantize(raw, "Q4_0", (2, 48))
    with pytest.raises(ModelLoadError, match="IQ2_XXS is not supported"):
        dequantize(raw, T.IQ2_XXS, (1, 256))
