"""The ``snake_beta`` kernel (``anna_xpu_kernels.snake``) under Triton's interpreter against the torch reference:
float32 to float32 rounding, float16 (whose rounding the interpreter does as torch does) equal but for the sine's
own last-bit differences, strided rows read in place; the opt-in switch; the Qwen3-TTS codec decoder with the kernel
serving its SnakeBeta layers against the torch expression."""

import json

import pytest
import torch

from tests.xpu_kernels._interp import require_triton_interpreter

require_triton_interpreter()

from anna_core.kernels.reference import activations as ref  # noqa: E402


def _case(b, c, t, dtype, seed=0, strided=False, time_major=False):
    gen = torch.Generator().manual_seed(seed)
    if time_major:  # [B, C, T] over [B, T, C] memory: the codec decoder's layout
        x = (torch.randn(b, t, c, generator=gen) * 4).transpose(1, 2).to(dtype)
    else:
        x = torch.randn(b, c, t + (9 if strided else 0), generator=gen) * 4
        x = (x[:, :, 5:5 + t] if strided else x).to(dtype)
    alpha, beta = (torch.randn(c, generator=gen) * 0.7).to(dtype), (torch.randn(c, generator=gen) * 0.7).to(dtype)
    return x, alpha, beta


@pytest.mark.parametrize("shape,layout", [((2, 5, 37), "contiguous"), ((3, 4, 1500), "strided"),
                                          ((1, 2, 1), "contiguous"), ((2, 7, 300), "time_major"),
                                          ((3, 1100, 3), "time_major")])
def test_matches_the_reference_in_float32(shape, layout):
    """Contiguous and time-major inputs are read in place and the output keeps their layout (the channel of each
    value follows it: a kernel reading time-major memory as [B, C, T] mixes channels up); other views are copied."""
    from anna_xpu_kernels.snake import snake_beta

    x, alpha, beta = _case(*shape, torch.float32, strided=layout == "strided", time_major=layout == "time_major")
    assert (layout == "contiguous") == x.is_contiguous()
    got, want = snake_beta(x, alpha, beta), ref.snake_beta(x, alpha, beta)
    assert got.shape == want.shape
    assert got.stride() == (x.stride() if layout == "time_major" else got.contiguous().stride())
    wide = shape[1] > 1000  # arguments up to ~100: two float32 sines then differ by up to ~2e-5
    torch.testing.assert_close(got, want, atol=5e-5 if wide else 2e-6, rtol=2e-5 if wide else 2e-6)


def test_float16_rounds_where_torch_rounds():
    """With the sine's argument rounded to float16 first (as torch's float16 expression does) the outputs are the
    reference's bit for bit but for the rare last-bit difference of two sine implementations; a kernel computing
    the argument in float32 differs by far more (arguments up to ~40, so one float16 ulp of it moves the sine)."""
    from anna_xpu_kernels.snake import snake_beta

    x, alpha, beta = _case(4, 8, 512, torch.float16, seed=1)
    got, want = snake_beta(x, alpha, beta), ref.snake_beta(x, alpha, beta)
    assert (got != want).float().mean() < 0.01
    torch.testing.assert_close(got, want, atol=2e-3, rtol=2e-3)
    exact = ref.snake_beta(x.float(), alpha.float(), beta.float()).half()  # no intermediate rounding
    assert (exact != want).float().mean() > 0.05


def test_checks_and_the_switch(monkeypatch):
    from anna_xpu_kernels import probes
    from anna_xpu_kernels._env import FUSED_SNAKE_ENV
    from anna_xpu_kernels.snake import snake_beta

    x, alpha, beta = _case(1, 3, 8, torch.float32)
    with pytest.raises(ValueError, match="snake_beta: alpha must be a \\[C\\] = \\[3\\] tensor"):
        snake_beta(x, alpha[:2], beta)
    with pytest.raises(ValueError, match="of x's dtype"):
        snake_beta(x, alpha.half(), beta)
    request = type("R", (), {"device_type": "cpu", "dtype": "float32", "shape": {}})()
    monkeypatch.delenv(FUSED_SNAKE_ENV, raising=False)
    assert not probes.snake_beta_probe(request)  # opt-in
    monkeypatch.setenv(FUSED_SNAKE_ENV, "1")
    monkeypatch.setattr(probes, "triton_device_available", lambda device_type: True)
    assert probes.snake_beta_probe(request)


@pytest.mark.parametrize("time_major", [False, True])
def test_codec_decoder_with_the_kernel_equals_the_torch_expression(time_major):
    """The 1.7B codec decoder's layout at a tiny width: every SnakeBeta on the kernel (streams continued in chunks,
    as the vocoder decodes them) gives the torch expression's samples (float32), with the decoder's activations
    [B, C, T]-contiguous and time-major (CUDA's)."""
    from anna_audio.qwen3_tts.codec_decoder import CodecDecoder
    from anna_audio.qwen3_tts.config import parse_codec
    from anna_audio.qwen3_tts.stream_state import StreamState
    from anna_xpu_kernels.snake import snake_beta

    raw = json.loads(open("tests/audio/reference_configs/Qwen3-TTS-Tokenizer-12Hz.json").read())
    raw["decoder_config"].update(decoder_dim=64, latent_dim=32, hidden_size=32, intermediate_size=64,
                                 num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2, head_dim=16,
                                 codebook_dim=16, codebook_size=64)
    cfg = parse_codec(raw).decoder

    class Ops:  # the op table's answer where anna-xpu-kernels' snake_beta serves
        @staticmethod
        def accelerated(op, **shape):
            return snake_beta if op == "snake_beta" else None

    torch.manual_seed(0)
    plain = CodecDecoder(cfg).eval()
    with torch.no_grad():
        for name, p in plain.named_parameters():
            if name.endswith(("alpha", "beta")):
                p.uniform_(-0.5, 0.5)
    fused = CodecDecoder(cfg, Ops(), time_major=time_major).eval()
    fused.load_state_dict(plain.state_dict())
    fused.layout_weights()
    assert all(m.snake is snake_beta for m in fused.modules() if type(m).__name__ == "SnakeBeta")
    codes = torch.randint(0, 64, (2, 5, cfg.num_quantizers))
    with torch.inference_mode():
        outs = []
        for decoder in (plain, fused):
            states = [StreamState(), StreamState()]
            outs.append(torch.cat([decoder.decode_streams(states, codes[:, :2]),
                                   decoder.decode_streams(states, codes[:, 2:])], dim=-1))
    torch.testing.assert_close(outs[1], outs[0], atol=2e-5, rtol=2e-5)
    assert outs[0].abs().max() > 0
