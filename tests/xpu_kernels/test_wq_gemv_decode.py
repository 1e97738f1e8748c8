"""The split-K decode kernel of the quantized-weight GEMV (``anna_xpu_kernels.wq_gemv_decode``) against the float32
references (``anna_core.kernels.reference.wq_linear``), under Triton's interpreter: every scheme at odd shapes,
1..8 rows, split-K on and off, the norm prologue and the gated epilogues; codes of every value (FP8 subnormals
included) decoded exactly; the shapes it leaves to the tiled kernel.

Bounds: 1e-5 of the largest output (both sides accumulate in float32; the kernel's group sums carry an offset,
a few bits of cancellation: measured up to 1.4e-6).
"""

import pytest
import torch

from tests.xpu_kernels._interp import require_triton_interpreter

require_triton_interpreter()

from anna_core.kernels.reference import wq_linear as ref  # noqa: E402

from tests.xpu_kernels._wq_cases import quantized_weight, rel  # noqa: E402

TOL = 1e-5


# (rows, N, K, config): odd N (clamped rows, masked stores), K past one tile and not a multiple of the tile,
# splits of 1 (no workspace), 2, 3 (a split with a partial range) and 4 (an empty split)
CASES = [
    (1, 37, 384, (8, 256, 1)),
    (3, 17, 1024, (4, 256, 3)),
    (8, 20, 512, (8, 128, 2)),
    (5, 9, 256, (4, 128, 4)),
    (2, 40, 640, (16, 512, 2)),
]


@pytest.mark.parametrize("scheme", ["int4", "int8", "fp8"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"m{c[0]}-n{c[1]}-k{c[2]}-s{c[3][2]}")
def test_matches_the_reference(scheme, case, poison_outputs):
    from anna_xpu_kernels import wq_gemv_decode as dec
    from anna_xpu_kernels.gemv import Prologue

    m, n, k, (bn, bk, splits) = case
    gen = torch.Generator().manual_seed(m * 100 + n)
    x, bias = torch.randn(m, k, generator=gen), torch.randn(n, generator=gen)
    w = quantized_weight(n, k, scheme, seed=n)
    assert dec.takes(x, w[0], scheme)
    got = dec.launch(x, *w, scheme, bias, n, k, Prologue(), 0, dec.WqConfig(bn, bk, splits))
    want = ref.wq_linear(x, *w, scheme, bias)
    assert got.shape == (m, n) and rel(got, want) <= TOL
    assert not dec.launch.counters.get(x.device, 1).any()  # the arrival counters are left at zero


@pytest.mark.parametrize("scheme", ["int4", "int8", "fp8"])
@pytest.mark.parametrize("activation", ["silu", "gelu_tanh"])
def test_norm_prologue_and_gated_epilogue(scheme, activation, poison_outputs):
    from anna_xpu_kernels import wq_gemv

    k, rows = 384, 3
    gen = torch.Generator().manual_seed(7)
    x, res, nw = torch.randn(rows, k, generator=gen), torch.randn(rows, k, generator=gen), torch.randn(k, generator=gen)
    w = quantized_weight(2 * 21, k, scheme, seed=3)  # 21 outputs: the last program's gate/up pairs are partly masked
    got = wq_gemv.add_rms_norm_wq_linear(x, res, nw, 1e-6, True, *w, scheme, activation)
    want = ref.add_rms_norm_wq_linear(x, res, nw, 1e-6, True, *w, scheme, activation)
    assert got[0].shape == (rows, 21) and rel(got[0], want[0]) <= TOL and torch.equal(got[1], want[1])


@pytest.mark.parametrize("scheme,native", [("int8", False), ("fp8", False), ("fp8", True)],
                         ids=["int8", "fp8-bits", "fp8-native"])
def test_every_code_is_decoded_exactly(scheme, native, monkeypatch):
    """One-hot rows read single weights: the kernel's output is ``q * scale`` to the last bit for each of the
    254 finite FP8 codes (subnormals and negative zero included) and each int8 code; FP8 through the shift-and-mask
    decode and through the hardware conversion's path (forced here: under the interpreter Triton's FP8 conversion
    stands in for the PTX)."""
    from anna_xpu_kernels import wq_gemv_decode as dec
    from anna_xpu_kernels.gemv import Prologue

    monkeypatch.setattr(dec, "native_fp8", lambda device: native)

    n, k = 256, 256
    codes = torch.arange(256, dtype=torch.int32).roll(1, 0)  # row r holds code r - 1 at column 8 + (r % 8)
    if scheme == "fp8":
        codes = torch.where((codes & 0x7F) == 0x7F, torch.zeros_like(codes), codes)  # no NaN codes
        q = torch.zeros(n, k, dtype=torch.uint8)
        q[torch.arange(n), 8 + torch.arange(n) % 8] = codes.to(torch.uint8)
        qweight = q.view(torch.float8_e4m3fn)
        scale = torch.rand(2, 2, generator=torch.Generator().manual_seed(0)) * 1e-2 + 1e-3
    else:
        q = torch.zeros(n, k, dtype=torch.int8)
        q[torch.arange(n), 8 + torch.arange(n) % 8] = (codes - 128).clamp(-127, 127).to(torch.int8)
        qweight = q
        scale = torch.rand(n, generator=torch.Generator().manual_seed(0)) * 1e-2 + 1e-3
    x = torch.zeros(8, k)
    x[torch.arange(8), 8 + torch.arange(8)] = 1.0
    got = dec.launch(x, qweight, scale, None, scheme, None, n, k, Prologue(), 0, dec.WqConfig(8, 128, 2))
    want = ref.wq_linear(x, qweight, scale, None, scheme, None)
    assert torch.equal(got, want)


def test_int4_codes_of_every_value():
    from anna_xpu_kernels import wq_gemv_decode as dec
    from anna_xpu_kernels.gemv import Prologue

    n, k = 16, 128
    gen = torch.Generator().manual_seed(1)
    nibbles = torch.arange(16).repeat(n, k // 16)  # every code in every position of a word
    qweight = (nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)).roll(3, 1).to(torch.uint8)
    scale, zero = torch.rand(n, 1, generator=gen) * 0.1, torch.randn(n, 1, generator=gen)
    x = torch.randn(1, k, generator=gen)
    got = dec.launch(x, qweight, scale, zero, "int4", None, n, k, Prologue(), 0, dec.WqConfig(4, 128, 1))
    assert rel(got, ref.wq_linear(x, qweight, scale, zero, "int4", None)) <= TOL


@pytest.mark.parametrize("paired", [True, False], ids=["paired", "unpaired"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rows,config", [(1, (8, 256, 1)), (2, (16, 128, 2)), (1, (4, 128, 3)), (4, (8, 256, 1))])
def test_int4_of_16_bit_rows_is_exact(dtype, rows, config, paired, monkeypatch, poison_outputs):
    """With ``ANNA_WQ_INT4_PAIRED=1`` one or two rows of 16-bit activations decode two int4 codes per shift
    (``PAIRED``: the odd code as ``1 + q / 16``, the even one as ``16 + q / 16``, the chain started at minus their
    offset); four rows, or the switch off (the default), one code per shift.
    With small integer activations, power-of-two scales and integer zeros every float32 sum of either path is an
    exact integer, so each output is the exact product rounded once to the output's dtype: equal, not close (bf16:
    rounded to nearest on a GPU, toward zero by Triton's interpreter). Every code value sits in every position of a
    word (a swapped or mis-shifted code changes the sum)."""
    from anna_xpu_kernels import wq_gemv_decode as dec
    from anna_xpu_kernels._env import WQ_INT4_PAIRED_ENV
    from anna_xpu_kernels.gemv import Prologue

    monkeypatch.setenv(WQ_INT4_PAIRED_ENV, "1" if paired else "0")
    n, k = 20, 384
    gen = torch.Generator().manual_seed(rows * 10 + config[2])
    nibbles = (torch.arange(16).repeat(n, k // 16) + torch.arange(n)[:, None]) % 16  # each row shifted by one
    nibbles[:, 128:] = torch.randint(0, 16, (n, k - 128), generator=gen)
    qweight = (nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)).to(torch.uint8)
    scale = 2.0 ** torch.randint(-3, 2, (n, k // 128), generator=gen).float()
    zero = torch.randint(-8, 8, (n, k // 128), generator=gen).float()
    x = torch.randint(-3, 4, (rows, k), generator=gen).to(dtype)
    weight = nibbles.double() * scale.double().repeat_interleave(128, 1) + zero.double().repeat_interleave(128, 1)
    exact = (x.double() @ weight.t()).float()  # integers below 2^24: exact in float32
    assert exact.abs().max() < 2**14
    want = exact.to(dtype)
    got = dec.launch(x, qweight, scale.to(dtype), zero.to(dtype), "int4", None, n, k, Prologue(), 0,
                     dec.WqConfig(*config))
    if dtype == torch.bfloat16:  # the interpreter's conversion truncates the float32 sum's low 16 bits
        toward_zero = (exact.view(torch.int32) & -65536).view(torch.float32).to(dtype)
        assert torch.equal(got, want) or torch.equal(got, toward_zero)
    else:
        assert torch.equal(got, want)
    assert not torch.equal(got, (x.double() @ weight.roll(1, 1).t()).to(dtype))  # the order of the codes matters


@pytest.mark.parametrize("rows", [1, 2])
def test_int4_of_fp16_rows_on_random_data(rows, monkeypatch, poison_outputs):
    """The paired decode (``ANNA_WQ_INT4_PAIRED=1``) on random data with outlier channels (a few activations 40 times the rest): each fp16
    output is the exact product (float64, of the dequantized weight) rounded to nearest, or within one unit in the
    last place of it where the exact product lies within the float32 sums' error of a rounding boundary (at most
    1 in 8 here), or within 1e-6 of the largest output (outputs near zero, after cancellation)."""
    from anna_xpu_kernels import wq_gemv_decode as dec
    from anna_xpu_kernels._env import WQ_INT4_PAIRED_ENV
    from anna_xpu_kernels.gemv import Prologue

    monkeypatch.setenv(WQ_INT4_PAIRED_ENV, "1")
    n, k = 48, 1024
    gen = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, k, generator=gen) * 3
    x[:, torch.randperm(k, generator=gen)[:8]] *= 40
    x = x.half()
    qweight, scale, zero = quantized_weight(n, k, "int4", seed=rows + 20)
    scale, zero = scale.half(), zero.half()  # the serving dtype's scales
    codes = torch.stack([qweight & 15, qweight >> 4], -1).reshape(n, k).double()  # low nibble: the even column
    weight = codes * scale.double().repeat_interleave(128, 1) + zero.double().repeat_interleave(128, 1)
    exact = x.double() @ weight.t()
    got = dec.launch(x, qweight, scale, zero, "int4", None, n, k, Prologue(), 0, dec.WqConfig(16, 256, 2))
    want = exact.to(torch.float16)
    bound = (want.double().abs() * 2.0**-10).clamp_min(1e-6 * exact.abs().max())  # one ulp, or 1e-6 of the largest
    off = (got.double() - want.double()).abs()
    assert (off <= bound * 1.001).all() and (off > 0).float().mean() <= 0.125


def test_shapes_it_leaves_to_the_tiled_kernel(poison_outputs):
    from anna_xpu_kernels import wq_gemv, wq_gemv_decode

    x = torch.randn(2, 12)
    w = quantized_weight(5, 12, "int8")  # K not a multiple of 8: no 8-code units
    assert not wq_gemv_decode.takes(x, w[0], "int8")
    assert rel(wq_gemv.wq_linear(x, *w, "int8", None), ref.wq_linear(x, *w, "int8", None)) <= TOL
    assert not wq_gemv_decode.takes(torch.randn(9, 128), quantized_weight(5, 128, "int4")[0], "int4")  # 9 rows


def test_int4_scales_in_either_layout(poison_outputs):
    """Row-major int4 scales (quantize's), group-major ones (strides ``(1, N)``) and zeros laid out unlike the
    scales give the same result through both kernels."""
    from anna_xpu_kernels import wq_gemv

    qweight, scale, zero = quantized_weight(24, 256, "int4", seed=5)
    scale_g, zero_g = scale.t().contiguous().t(), zero.t().contiguous().t()
    assert scale_g.stride() == (1, 24)
    for rows in (3, 12):  # the decode kernel, the tiled kernel
        x = torch.randn(rows, 256, generator=torch.Generator().manual_seed(rows))
        want = ref.wq_linear(x, qweight, scale, zero, "int4", None)
        for s, z in ((scale, zero), (scale_g, zero_g), (scale_g, zero)):
            assert rel(wq_gemv.wq_linear(x, qweight, s, z, "int4", None), want) <= TOL


def test_tuning_space_per_shape():
    """Splits only where the row blocks start few programs (the smallest that reaches the target), none for
    wide N; 32-row tiles at one row only; tiles no wider than K."""
    from anna_xpu_kernels import wq_gemv_decode as dec

    def kept(n, k, m):
        configs = dec.prune(dec.tuning_space(), {"N": n, "K": k}, BLOCK_M=m)
        return {(c.kwargs["BLOCK_N"], c.kwargs["BLOCK_K"], c.kwargs["SPLIT_K"], c.num_warps) for c in configs}

    down = kept(4096, 12288, 1)  # Qwen3.5-9B's down projection: 512 row blocks of 8 -> split 2
    assert (8, 1024, 2, 4) in down and (8, 1024, 4, 4) not in down and (16, 1024, 4, 4) in down
    assert (32, 1024, 8, 4) in down and len(down) == 8
    assert all(s == 1 for _, _, s, _ in kept(248320, 4096, 1))  # the LM head: rows enough
    assert kept(24576, 4096, 8) == {(4, 1024, 1, 4), (8, 1024, 1, 4), (8, 2048, 1, 8)}  # 8 rows
    assert kept(4096, 384, 1) == kept(64, 128, 8) == {(8, 256, 1, 4)}  # nothing fits: the interpreter's configuration


def test_hardware_fp8_conversion_and_int4_pairing_switches(monkeypatch, poison_outputs):
    """The FP8 codes' hardware conversion (inline PTX, CUDA sm_89+) is on unless ``ANNA_WQ_FP8_CVT=0``, but never on
    the CPU nor under the interpreter (the shift-and-mask decode runs: a set switch does not change the CPU's
    result); the int4 pairing is off unless ``ANNA_WQ_INT4_PAIRED=1``."""
    from anna_xpu_kernels import wq_gemv
    from anna_xpu_kernels import wq_gemv_decode as dec
    from anna_xpu_kernels._env import (
        WQ_FP8_CVT_ENV,
        WQ_INT4_PAIRED_ENV,
        wq_fp8_cvt_requested,
        wq_int4_paired_requested,
    )

    monkeypatch.delenv(WQ_FP8_CVT_ENV, raising=False)
    monkeypatch.delenv(WQ_INT4_PAIRED_ENV, raising=False)
    assert wq_fp8_cvt_requested() and not wq_int4_paired_requested() and not dec.native_fp8(torch.device("cpu"))
    x = torch.randn(1, 256, generator=torch.Generator().manual_seed(3))
    w = quantized_weight(16, 256, "fp8", seed=3)
    default = wq_gemv.wq_linear(x, *w, "fp8", None)
    for value, on in (("1", True), ("true", True), ("0", False), ("off", False), ("", True)):
        monkeypatch.setenv(WQ_FP8_CVT_ENV, value)
        assert wq_fp8_cvt_requested() is on and not dec.native_fp8(torch.device("cpu"))
        assert torch.equal(wq_gemv.wq_linear(x, *w, "fp8", None), default)
    assert rel(default, ref.wq_linear(x, *w, "fp8", None)) <= TOL
    for value, on in (("1", True), ("yes", True), ("0", False), ("", False)):
        monkeypatch.setenv(WQ_INT4_PAIRED_ENV, value)
        assert wq_int4_paired_requested() is on


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rows", [1, 3])
def test_fp8_native_path_equals_the_bit_decode(dtype, rows, monkeypatch, poison_outputs):
    """The FP8 tile with ``NATIVE_FP8`` (its codes' own values, ``acc += s P``; forced under the interpreter, where
    Triton's FP8 conversion stands in for the PTX) gives the shift-and-mask decode's outputs bit for bit on random
    16-bit rows (both sums exact code values in the same order; the bit decode's ``2^-120`` scaling is exact for
    such activations), split-K on, and the reference's within the tolerance."""
    from anna_xpu_kernels import wq_gemv_decode as dec
    from anna_xpu_kernels.gemv import Prologue

    n, k = 24, 512
    qweight, scale, zero = quantized_weight(n, k, "fp8", seed=rows)
    x = (torch.randn(rows, k, generator=torch.Generator().manual_seed(rows)) * 2).to(dtype)
    config = dec.WqConfig(8, 256, 2)
    monkeypatch.setattr(dec, "native_fp8", lambda device: False)
    bits = dec.launch(x, qweight, scale, zero, "fp8", None, n, k, Prologue(), 0, config)
    monkeypatch.setattr(dec, "native_fp8", lambda device: True)
    native = dec.launch(x, qweight, scale, zero, "fp8", None, n, k, Prologue(), 0, config)
    assert torch.equal(native, bits)
    assert rel(native, ref.wq_linear(x.float(), qweight, scale, zero, "fp8", None)) <= 1e-2


def test_native_fp8_needs_an_nvidia_device_of_sm89(monkeypatch):
    """The hardware conversion is asked of CUDA devices only, and there only of NVIDIA ones (ROCm reports ``cuda``
    devices too) of compute capability 8.9 or more."""
    from anna_xpu_kernels import wq_gemv_decode as dec

    monkeypatch.setattr(dec, "INTERPRETING", False)
    for hip, capability, want in ((None, (9, 0), True), (None, (8, 9), True), (None, (8, 6), False),
                                  ("6.2", (9, 4), False)):
        dec._has_fp8_cvt.cache_clear()
        monkeypatch.setattr(torch.version, "hip", hip)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None, c=capability: c)
        assert dec.native_fp8(torch.device("cuda", 0)) is want
        assert not dec.native_fp8(torch.device("cpu")) and not dec.native_fp8(torch.device("xpu", 0))
    dec._has_fp8_cvt.cache_clear()
