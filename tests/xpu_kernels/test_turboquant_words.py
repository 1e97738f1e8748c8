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
    settings = tq._launch_settings
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
    # auto (the default on CUDA): words-capped at 256, spread elsewhere and at prefill
    assert picked(settings(default, True, 256, False, "auto")) == ("words", "lane", 1, 128, False)
    for block_d in (128, 512):
        assert picked(settings(default, True, block_d, False, "auto")) == picked(settings(default, True, block_d, False))
    assert picked(settings(default, False, 256, False, "auto")) == ("spread", "gather", 2, None, False)
    explicit = tq.TurboQuantTuning(unpack="spread", lookup="select", num_stages=2, max_registers=200,
                                   opaque_operands=False)
    assert picked(settings(explicit, True, 256, False, "words")) == ("spread", "select", 2, 200, False)
    with pytest.raises(ValueError, match="unpack"):
        tq.TurboQuantTuning(unpack="bytes")
    with pytest.raises(ValueError, match="lookup"):
        tq.TurboQuantTuning(lookup="prmt")


def test_the_decode_switch_reads_its_environment_variable(monkeypatch):
    from anna_xpu_kernels._env import TURBOQUANT_DECODE_ENV, turboquant_decode_requested

    monkeypatch.delenv(TURBOQUANT_DECODE_ENV, raising=False)
    assert turboquant_decode_requested() == "auto"
    monkeypatch.setenv(TURBOQUANT_DECODE_ENV, "spread")
    assert turboquant_decode_requested() == "spread"
    monkeypatch.setenv(TURBOQUANT_DECODE_ENV, " Words ")
    assert turboquant_decode_requested() == "words"
    monkeypatch.setenv(TURBOQUANT_DECODE_ENV, "words-capped")
    assert turboquant_decode_requested() == "words-capped"
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
