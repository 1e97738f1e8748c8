"""The ``words`` decode of the TurboQuant attention (anna_xpu_kernels.turboquant_codes: whole units expanded inside
each thread, columns permuted within a unit) against the torch reference on the CPU through Triton's interpreter:
32-bit units (head dims that are multiples of 32) and bytes (40), one and two column chunks, a residual ring, a
window, splits, MSE keys, 2 to 4 bits, a head dim of 512; and the ``lane`` lookup's selection (its values come
from a gather under the interpreter: the PTX shuffle itself runs on a GPU only, tools/gpu_experiments/tq_decode_micro.py
compares it with the reference there)."""

import pytest
import torch
from anna_core.kernels.reference import turboquant as ref

from tests.xpu_kernels._interp import require_triton_interpreter

require_triton_interpreter()

from anna_xpu_kernels import turboquant as tq  # noqa: E402
from anna_xpu_kernels.turboquant_launch import launch_settings  # noqa: E402

from tests.xpu_kernels._turboquant_data import batch as _batch  # noqa: E402


@pytest.mark.parametrize("bits,d,key_qjl,d_chunks,ring,window,splits,lookup", [
    (4, 64, True, 1, False, None, None, "lane"), (3, 40, True, 2, True, None, 2, "shuffle"),
    (2, 32, True, 1, True, 3, None, "select"), (3, 64, False, 2, False, 5, 3, "lane")])
def test_words_decode_matches_the_reference(bits, d, key_qjl, d_chunks, ring, window, splits, lookup):
    """A decode, a fresh prompt and a chunk over a cached prefix, then a decode-only batch (the DECODE path)."""
    args = list(_batch(bits, d, 4, 2, key_qjl=key_qjl, ring=ring, seed=bits))
    args[7] = window
    tuning = tq.TurboQuantTuning(dot="ieee", unpack="words", lookup=lookup, d_chunks=d_chunks)
    torch.testing.assert_close(tq.paged_attention_turboquant(*args, num_splits=splits, tuning=tuning),
                               ref.paged_attention_turboquant(*args), rtol=2e-5, atol=2e-5)
    dec = (args[0][:3], *args[1:3], torch.arange(4, dtype=torch.int32), *args[4:])
    torch.testing.assert_close(tq.paged_attention_turboquant(*dec, num_splits=splits, tuning=tuning),
                               ref.paged_attention_turboquant(*dec), rtol=2e-5, atol=2e-5)


def test_words_decode_at_a_head_dim_of_512_matches_the_reference():
    """Gemma 4's global layers (8 query heads on 2 KV heads, 512: two chunks of 256, eight 32-bit units each)."""
    args = _batch(4, 512, 8, 2, seed=4)
    dec = (args[0][:3], *args[1:3], torch.arange(4, dtype=torch.int32), *args[4:])
    tuning = tq.TurboQuantTuning(dot="ieee", unpack="words", lookup="lane")
    torch.testing.assert_close(tq.paged_attention_turboquant(*dec, num_splits=2, tuning=tuning),
                               ref.paged_attention_turboquant(*dec), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("bits,key_qjl", [(4, True), (3, False)])
def test_words_bf16_operands_equal_the_spread_decodes(bits, key_qjl):
    """With a bf16 query the signs are bf16 bit patterns made from the sign bits (no conversion): the operands
    equal the ``spread`` decode's, so the outputs differ only by the dots' summation order (the permuted columns)."""
    args = list(_batch(bits, 64, 4, 2, key_qjl=key_qjl, seed=7))
    args[0] = args[0].bfloat16()
    spread = tq.paged_attention_turboquant(*args, tuning=tq.TurboQuantTuning(unpack="spread")).float()
    words = tq.paged_attention_turboquant(*args, tuning=tq.TurboQuantTuning(unpack="words", lookup="lane")).float()
    want = ref.paged_attention_turboquant(*args).float()
    assert (words - spread).abs().max() <= 2 ** -7 * want.abs().max()
    assert (words - want).abs().max() <= 2 * (spread - want).abs().max() + 1e-6


def test_words_is_the_decode_default_when_asked_for():
    """``ANNA_TURBOQUANT_DECODE=words``: the words decode with the lane lookup and opaque operands at a decode with a
    padded head dim of 256 (capped at 168 registers) or 512, the words decode alone at other decode widths;
    ``words-capped`` takes 8-bit operand fragments, one stage and 128 registers at 256 instead; prefill keeps
    ``spread``; explicit settings win."""
    settings = launch_settings
    default = tq.TurboQuantTuning()

    def picked(launch):
        return launch.unpack, launch.lookup, launch.num_stages, launch.max_registers, launch.opaque

    for block_d in (256, 512):
        assert picked(settings(default, True, block_d, False, "words"))[:2] == ("words", "lane")
        assert picked(settings(default, True, block_d, False))[:2] == ("spread", "shuffle")
    assert picked(settings(default, True, 256, False, "words")) == ("words", "lane", 2, 168, True)
    assert picked(settings(default, True, 512, False, "words")) == ("words", "lane", 2, None, True)
    assert picked(settings(default, True, 256, False, "words-capped")) == ("words", "lane", 1, 128, False)
    assert picked(settings(default, True, 512, False, "words-capped")) == ("words", "lane", 2, None, True)
    assert picked(settings(default, True, 128, False, "words")) == ("words", "gather", 3, None, False)
    assert picked(settings(default, False, 256, False, "words-capped")) == ("spread", "gather", 2, None, False)
    # auto (the default on CUDA): words-chunked at 256 (words-capped with a window) and 512, spread elsewhere and at
    # prefill
    assert settings(default, True, 256, False, "auto") == settings(default, True, 256, False, "words-chunked")
    assert settings(default, True, 256, True, "auto") == settings(default, True, 256, True, "words-capped")
    assert settings(default, True, 256, False, "auto").d_chunks == 2
    assert picked(settings(default, True, 256, True, "auto")) == ("words", "lane", 1, 128, False)
    assert settings(default, True, 512, False, "auto") == settings(default, True, 512, False, "words-chunked")
    assert picked(settings(default, True, 128, False, "auto")) == picked(settings(default, True, 128, False))
    assert picked(settings(default, False, 256, False, "auto")) == ("spread", "gather", 2, None, False)
    assert picked(settings(default, False, 512, False, "auto")) == ("spread", "gather", 2, None, False)
    explicit = tq.TurboQuantTuning(unpack="spread", lookup="select", num_stages=2, max_registers=200,
                                   opaque_operands=False)
    assert picked(settings(explicit, True, 256, False, "words")) == ("spread", "select", 2, 200, False)
    with pytest.raises(ValueError, match="unpack"):
        tq.TurboQuantTuning(unpack="bytes")
    with pytest.raises(ValueError, match="lookup"):
        tq.TurboQuantTuning(lookup="prmt")


def test_the_chunked_words_decodes_take_their_settings():
    """``words-chunked``: two column chunks at 256 (the 9B setting measured fastest: 2 stages, 168 registers, opaque
    operands, 32 keys, 8 splits without a window); at 512 (two chunks anyway) 32 keys per tile and one stage, no
    cap; ``words-chunked-capped``: one stage and 128 registers at 256, ``words-chunked``'s at 512; other widths and
    prefill as ``words`` / ``spread``."""
    default = tq.TurboQuantTuning()

    def picked(launch):
        return (launch.unpack, launch.lookup, launch.d_chunks, launch.block_n, launch.num_warps, launch.num_stages,
                launch.max_registers, launch.opaque, launch.splits)

    assert picked(launch_settings(default, True, 256, False, "words-chunked")) == (
        "words", "lane", 2, 32, 4, 2, 168, True, 8)
    assert picked(launch_settings(default, True, 256, True, "words-chunked")) == (
        "words", "lane", 2, 32, 4, 2, 168, True, None)
    assert picked(launch_settings(default, True, 512, False, "words-chunked")) == (
        "words", "lane", 2, 32, 4, 1, None, True, None)
    assert picked(launch_settings(default, True, 256, True, "words-chunked-capped")) == (
        "words", "lane", 2, 32, 4, 1, 128, True, None)
    assert launch_settings(default, True, 512, False, "words-chunked-capped") == launch_settings(
        default, True, 512, False, "words-chunked")
    for choice in ("words-chunked", "words-chunked-capped"):
        assert launch_settings(default, True, 128, False, choice) == launch_settings(default, True, 128, False, "words")
        assert launch_settings(default, False, 256, False, choice) == launch_settings(default, False, 256, False)
    # explicit settings still win
    assert launch_settings(tq.TurboQuantTuning(d_chunks=1, block_n=16, num_stages=3), True, 512, False,
                           "words-chunked").d_chunks == 1


def _tuning(launch, dot="ieee"):
    """The explicit :class:`TurboQuantTuning` of ``launch`` (the interpreter ignores stages and register caps, and
    runs the ``lane`` lookup as a gather: d_chunks, block_n, the unpack and the splits still take the real paths)."""
    return tq.TurboQuantTuning(dot=dot, lookup=launch.lookup, block_n=launch.block_n, num_warps=launch.num_warps,
                               num_stages=launch.num_stages, d_chunks=launch.d_chunks, unpack=launch.unpack,
                               max_registers=launch.max_registers, opaque_operands=launch.opaque)


@pytest.mark.parametrize("choice,bits,d,window,ring,splits", [
    ("words-chunked", 4, 512, None, False, 2), ("words-chunked", 3, 512, None, True, None),
    ("words-chunked", 4, 256, 5, False, 3), ("words-chunked-capped", 4, 256, 7, True, 2),
    ("words-chunked-capped", 3, 256, None, False, 8)])
def test_chunked_words_decodes_match_the_reference(choice, bits, d, window, ring, splits):
    """Each new decode choice's settings at Gemma 4 E4B's widths (global: 512; sliding: 256 with a window) and the
    9B's, 8 query heads on 2 KV heads, against the torch reference: a decode-only batch (the DECODE path, 32-key
    tiles over 13 / 6 / 21 keys), with a residual ring and splits in some."""
    args = list(_batch(bits, d, 8, 2, ring=ring, seed=bits + d))
    args[7] = window
    dec = (args[0][:3], *args[1:3], torch.arange(4, dtype=torch.int32), *args[4:])
    tuning = _tuning(launch_settings(tq.TurboQuantTuning(), True, d, window is not None, choice))
    torch.testing.assert_close(tq.paged_attention_turboquant(*dec, num_splits=splits, tuning=tuning),
                               ref.paged_attention_turboquant(*dec), rtol=2e-5, atol=2e-5)


def test_the_decode_switch_reads_its_environment_variable(monkeypatch):
    from anna_xpu_kernels._env import TURBOQUANT_DECODE_ENV, turboquant_decode_requested

    monkeypatch.delenv(TURBOQUANT_DECODE_ENV, raising=False)
    assert turboquant_decode_requested() == "auto"
    monkeypatch.setenv(TURBOQUANT_DECODE_ENV, "spread")
    assert turboquant_decode_requested() == "spread"
    monkeypatch.setenv(TURBOQUANT_DECODE_ENV, " Words ")
    assert turboquant_decode_requested() == "words"
    for choice in ("words-capped", "words-chunked", "words-chunked-capped"):
        monkeypatch.setenv(TURBOQUANT_DECODE_ENV, choice)
        assert turboquant_decode_requested() == choice
    monkeypatch.setenv(TURBOQUANT_DECODE_ENV, "fast")
    with pytest.raises(ValueError, match=TURBOQUANT_DECODE_ENV):
        turboquant_decode_requested()


def test_a_register_cap_is_checked_and_launches():
    with pytest.raises(ValueError, match="max_registers"):
        tq.TurboQuantTuning(max_registers=300)
    args = _batch(4, 32, 4, 2, seed=11)
    dec = (args[0][:3], *args[1:3], torch.arange(4, dtype=torch.int32), *args[4:])
    capped = tq.TurboQuantTuning(dot="ieee", unpack="words", num_stages=1, max_registers=128)
    torch.testing.assert_close(tq.paged_attention_turboquant(*dec, tuning=capped),
                               ref.paged_attention_turboquant(*dec), rtol=2e-5, atol=2e-5)
