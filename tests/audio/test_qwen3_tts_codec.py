"""The 12 Hz codec decoder (:mod:`anna_audio.qwen3_tts.codec_decoder`) against the reference's golden outputs:
each stage and the waveform for given codes, batched rows against rows alone, streamed chunks against the whole
decode -- in both layouts (``[B, C, T]``-contiguous, the CPU's, and time-major, opt-in on CUDA) and with the dilated
convolutions computed over their phases (CUDA's) -- and the errors of bad
codes and mismatched checkpoints."""

from __future__ import annotations

import shutil

import pytest
import torch
from anna_audio.qwen3_tts import StreamingDecoder, load_codec_decoder, load_config
from anna_audio.qwen3_tts.codec_decoder import CodecDecoder
from anna_audio.qwen3_tts.codec_layers import CausalConv1d, CausalTransposedConv1d, phased_conv1d
from anna_audio.qwen3_tts.stream_state import StreamState
from anna_core.errors import ModelLoadError

from tests.audio.tts_golden import CHECKPOINTS, golden

WAVE_ATOL = 1e-4
"""Largest waveform difference allowed against the reference (float32 on the CPU; seen: about 1e-6)."""
STAGE_ATOL = 1e-5


@pytest.fixture(scope="module", params=["contiguous", "time_major", "phased", "time_major_phased"])
def codec(request):
    tensors, facts = golden("codec")
    config = load_config(CHECKPOINTS["base"])
    decoder = load_codec_decoder(CHECKPOINTS["base"], config)  # on the CPU: [B, C, T]-contiguous
    assert not decoder.time_major
    if request.param != "contiguous":  # time-major: opt-in on CUDA; phased: CUDA's, run on the CPU
        loaded = decoder
        decoder = CodecDecoder(config.codec.decoder, time_major=request.param.startswith("time_major"),
                               phased_min_channels=0 if request.param.endswith("phased") else None)
        decoder.load_state_dict(loaded.state_dict())
        decoder.layout_weights().eval()
        phased = [m for m in decoder.modules() if isinstance(m, CausalConv1d) and m.phased]
        assert len(phased) == (2 * len(config.codec.decoder.upsample_rates) if request.param.endswith("phased") else 0)
    return decoder, tensors, facts


@pytest.mark.parametrize(("batch", "channels", "length", "dilation"), [
    (2, 5, 40, 3), (1, 4, 41, 9), (3, 3, 20, 2), (2, 4, 55, 9), (1, 2, 7, 1)])
def test_phased_convolution_is_the_dilated_one(batch, channels, length, dilation):
    """Any length (padded up to a multiple of the dilation inside, the extra outputs dropped), bias included; a
    time-major input gives a time-major output."""
    torch.manual_seed(length)
    conv = torch.nn.Conv1d(channels, channels + 1, 7, dilation=dilation).double()
    x = torch.randn(batch, channels, length + 6 * dilation, dtype=torch.float64)
    torch.testing.assert_close(phased_conv1d(x, conv), conv(x), atol=1e-12, rtol=0)
    tm = phased_conv1d(x.transpose(1, 2).contiguous().transpose(1, 2), conv, time_major=True)
    assert tm.transpose(1, 2).is_contiguous()
    torch.testing.assert_close(tm, conv(x), atol=1e-12, rtol=0)


def test_loaders_phase_dilated_convolutions_on_cuda_only_when_asked(monkeypatch):
    from anna_audio.qwen3_tts.codec_decoder import PHASED_MIN_CHANNELS_ENV, phased_min_channels_for

    monkeypatch.delenv(PHASED_MIN_CHANNELS_ENV, raising=False)
    assert phased_min_channels_for("cpu") is phased_min_channels_for("cuda") is None  # opt-in
    monkeypatch.setenv(PHASED_MIN_CHANNELS_ENV, "256")
    assert phased_min_channels_for(torch.device("cuda", 0)) == 256
    assert phased_min_channels_for("cpu") is phased_min_channels_for("xpu") is phased_min_channels_for("meta") is None
    monkeypatch.setenv(PHASED_MIN_CHANNELS_ENV, "0")
    assert phased_min_channels_for("cuda") == 0
    monkeypatch.setenv(PHASED_MIN_CHANNELS_ENV, "wide")
    with pytest.raises(ValueError, match="ANNA_CODEC_PHASED_MIN_CHANNELS must be a non-negative integer"):
        phased_min_channels_for("cuda")
    monkeypatch.setenv(PHASED_MIN_CHANNELS_ENV, "0")
    config = load_config(CHECKPOINTS["base"])
    assert not any(m.phased for m in load_codec_decoder(CHECKPOINTS["base"], config).modules()
                   if isinstance(m, CausalConv1d))  # loaded on the CPU


@pytest.mark.parametrize("phased_min_channels", [None, 0])
def test_time_major_layout_holds_through_the_stack(phased_min_channels):
    """A time-major decoder's convolutions read and write time-major activations (no layout conversion between
    them: a layer falling back to [B, C, T] would pay one in and out of every later convolution), its weights are
    stored time-major, and the values are the [B, C, T] decoder's."""
    config = load_config(CHECKPOINTS["base"])
    plain = load_codec_decoder(CHECKPOINTS["base"], config)
    decoder = CodecDecoder(config.codec.decoder, time_major=True, phased_min_channels=phased_min_channels)
    decoder.load_state_dict(plain.state_dict())
    decoder.layout_weights().eval()
    layouts = []
    hooks = [m.register_forward_hook(lambda mod, inp, out: layouts.append((type(mod).__name__, out.shape,
                                                                            out.transpose(1, 2).is_contiguous())))
             for m in decoder.modules() if isinstance(m, (CausalConv1d, CausalTransposedConv1d))]
    codes = torch.stack([golden("codec")[0]["codec/codes/0"][:6]] * 2)
    with torch.inference_mode():
        got, want = decoder(codes), plain(codes)
    for h in hooks:
        h.remove()
    wide = [(name, shape, tm) for name, shape, tm in layouts if shape[1] > 1]
    assert len(wide) >= 10 and all(tm for _, _, tm in wide), wide
    convs = [m.conv.weight for m in decoder.modules() if isinstance(m, CausalConv1d) and m.conv.kernel_size[0] > 1]
    assert convs and all(w.transpose(1, 2).is_contiguous() for w in convs)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("kernel,stride", [(3, 3), (6, 3)])
def test_transposed_conv_keeps_its_rearranged_weights_until_they_change(kernel, stride):
    """The time-major transposed convolution builds its rearranged weight once (a kernel-2 one channels-last), keeps
    it across calls, and rebuilds it when the weights change in place, move dtype or are replaced: the output always
    equals the [B, C, T] layer's on the current weights."""
    torch.manual_seed(0)
    plain = CausalTransposedConv1d(5, 4, kernel, stride)
    tm = CausalTransposedConv1d(5, 4, kernel, stride, time_major=True)
    tm.load_state_dict(plain.state_dict())
    x = torch.randn(2, 7, 5).transpose(1, 2)  # time-major [B, C, T]

    def check(dtype=torch.float32):
        got = tm(x.to(dtype))
        tol = 1e-5 if dtype == torch.float32 else 2e-2
        torch.testing.assert_close(got.float(), plain.to(dtype)(x.to(dtype)).float(), atol=tol, rtol=0)
        assert got.transpose(1, 2).is_contiguous()

    first = tm.rearranged()
    check()
    assert tm.rearranged()[0] is first[0]  # kept
    if kernel == 2 * stride:
        assert first[0].shape == (stride * 4, 5, 1, 2) and first[0].is_contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        plain.conv.weight.mul_(-2.0)
    tm.load_state_dict(plain.state_dict())  # an in-place copy into the same parameters
    assert tm.rearranged()[0] is not first[0]
    check()
    tm.conv.weight = torch.nn.Parameter(torch.randn_like(tm.conv.weight))  # a new parameter
    plain.conv.weight = torch.nn.Parameter(tm.conv.weight.detach().clone())
    check()
    tm.to(torch.bfloat16)
    assert tm.rearranged()[0].dtype == torch.bfloat16
    check(torch.bfloat16)
    tm.to(torch.float32)
    plain.to(torch.float32)
    with torch.no_grad():  # a write through .data bumps no version: layout_weights' rebuild picks it up
        tm.conv.weight.data.copy_(plain.conv.weight.data.mul_(0.5))
    tm.drop_rearranged()
    check()


def test_waveforms_match_reference(codec):
    decoder, g, facts = codec
    codes = [g["codec/codes/0"], g["codec/codes/1"]]
    with torch.inference_mode():
        wavs = decoder.decode(codes)
    for i, wav in enumerate(wavs):
        reference = g[f"codec/wav/{i}"]
        assert wav.shape == reference.shape == (facts["decoder"]["samples"][i],)
        torch.testing.assert_close(wav, reference, atol=WAVE_ATOL, rtol=0)
        assert 0.1 < float(reference.std()) < 0.6  # a signal, not silence or a saturated square


def test_stages_match_reference(codec):
    decoder, g, _ = codec
    codes = g["codec/codes/0"][None]
    with torch.inference_mode():
        quantized = decoder.quantizer(codes.transpose(1, 2))
        pre_conv = decoder.pre_conv(quantized).transpose(1, 2)
        pre_transformer = decoder.pre_transformer(pre_conv)
        h = pre_transformer.transpose(1, 2)
        for transposed, convnext in decoder.upsample:
            h = convnext(transposed(h))
    for name, value in (("quantized", quantized), ("pre_conv", pre_conv), ("pre_transformer", pre_transformer),
                        ("upsampled", h)):
        torch.testing.assert_close(value[0], g[f"codec/stage/{name}"], atol=STAGE_ATOL, rtol=0, msg=name)


def test_batch_rows_equal_alone(codec):
    decoder, g, _ = codec
    codes = [g["codec/codes/1"], g["codec/codes/1"][:5], g["codec/codes/0"][:0]]
    with torch.inference_mode():
        batched = decoder.decode(codes)
        for c, wav in zip(codes, batched):
            alone = decoder.decode([c])[0]
            assert wav.shape == alone.shape == (c.shape[0] * 1920,)
            torch.testing.assert_close(wav, alone, atol=1e-5, rtol=0)


@pytest.mark.parametrize("cuts", [(1,), (5, 6, 13), (2, 3, 4, 9, 10, 11)])
def test_streamed_chunks_equal_whole(codec, cuts):
    """14 frames (the attention window is 8), cut into chunks of one frame up to more than a window."""
    decoder, g, _ = codec
    codes = torch.stack((g["codec/codes/0"][:14], g["codec/codes/0"][:14].flip(0)))  # [2, 14, Q]
    with torch.inference_mode():
        whole = decoder(codes)
    stream = StreamingDecoder(decoder)
    bounds = [0, *cuts, codes.shape[1]]
    parts = [stream.push(codes[:, a:b]) for a, b in zip(bounds, bounds[1:])]
    assert stream.frames == 14
    assert [p.shape[1] for p in parts] == [(b - a) * 1920 for a, b in zip(bounds, bounds[1:])]
    torch.testing.assert_close(torch.cat(parts, dim=1), whole, atol=1e-5, rtol=0)


def test_streams_at_different_positions_batch_together(codec):
    """Requests of a serving step sit at different frames: one batched call per step equals each stream alone."""
    decoder, g, _ = codec
    seqs = [g["codec/codes/0"][:14], g["codec/codes/1"][:14], g["codec/codes/0"][3:17]]
    with torch.inference_mode():
        alone = [decoder(s[None])[0] for s in seqs]
    streams = [StreamState() for _ in seqs]
    out: list[list[torch.Tensor]] = [[], [], []]
    out[1].append(decoder.decode_streams([streams[1]], seqs[1][None, :5])[0])  # stream 1 runs ahead alone
    out[2].append(decoder.decode_streams([streams[2]], seqs[2][None, :9])[0])
    for rows, frames in (([0, 1, 2], 3), ([0, 1], 2), ([2, 0], 1)):
        chunk = torch.stack([seqs[r][streams[r].frames:streams[r].frames + frames] for r in rows])
        wav = decoder.decode_streams([streams[r] for r in rows], chunk)
        for i, r in enumerate(rows):
            out[r].append(wav[i])
    for r, parts in enumerate(out):
        got = torch.cat(parts)
        assert got.shape[0] == streams[r].frames * 1920
        torch.testing.assert_close(got, alone[r][: got.shape[0]], atol=1e-5, rtol=0, msg=f"stream {r}")
    with pytest.raises(ValueError, match="for 2 streams"):
        decoder.decode_streams(streams[:2], seqs[0][None, :1])


@pytest.mark.parametrize("codes, message", [
    (torch.zeros(1, 3, 3, dtype=torch.int64), r"\[batch, frames, 4\]"),
    (torch.full((1, 3, 4), 64, dtype=torch.int64), r"\[0, 64\)"),
    (torch.full((1, 3, 4), -1, dtype=torch.int64), r"\[0, 64\)"),
    (torch.zeros(1, 3, 4), "integers"),
])
def test_bad_codes(codec, codes, message):
    decoder, _, _ = codec
    with pytest.raises(ValueError, match=message):
        decoder(codes)


def _edited_checkpoint(tmp_path, edit):
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "ckpt"
    shutil.copytree(CHECKPOINTS["base"], folder)
    path = folder / "speech_tokenizer" / "model.safetensors"
    tensors = load_file(str(path))
    edit(tensors)
    save_file(tensors, str(path))
    return folder


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.pop("decoder.pre_conv.conv.weight"), r"missing tensors .*'pre_conv\.conv\.weight'"),
    (lambda t: t.update({"decoder.extra.weight": torch.zeros(1)}), r"unexpected tensors .*'decoder\.extra\.weight'"),
    (lambda t: t.update({"decoder.decoder.6.conv.weight": torch.zeros(1, 2, 5)}),
     r"shape mismatches: .*decoder\.decoder\.6\.conv\.weight"),
])
def test_load_errors(tmp_path, edit, message):
    golden("codec")
    folder = _edited_checkpoint(tmp_path, edit)
    with pytest.raises(ModelLoadError, match=message):
        load_codec_decoder(folder, load_config(folder))


def test_loaders_pick_time_major_on_cuda_only_when_asked(monkeypatch):
    """``ANNA_CODEC_TIME_MAJOR=1`` makes the loaders build a time-major decoder on CUDA (opt-in until measured on a
    GPU); the CPU, where it is slower, never gets one."""
    from anna_audio.qwen3_tts.codec_decoder import TIME_MAJOR_ENV, time_major_for

    monkeypatch.delenv(TIME_MAJOR_ENV, raising=False)
    assert not time_major_for("cuda") and not time_major_for(torch.device("cpu"))
    monkeypatch.setenv(TIME_MAJOR_ENV, "1")
    assert time_major_for(torch.device("cuda", 0)) and time_major_for("cuda")
    assert not time_major_for("cpu") and not time_major_for("xpu")
    config = load_config(CHECKPOINTS["base"])
    assert not load_codec_decoder(CHECKPOINTS["base"], config).time_major  # loaded on the CPU


def test_time_major_load_sequence(monkeypatch):
    """The loader's own time-major sequence (built on the meta device, weights assigned, then laid out): the weights
    end up time-major and the waveform is the [B, C, T] load's (the CPU stands in for CUDA)."""
    from anna_audio.qwen3_tts import weights

    config = load_config(CHECKPOINTS["base"])
    plain = load_codec_decoder(CHECKPOINTS["base"], config)
    monkeypatch.setattr(weights, "time_major_for", lambda device: True)
    decoder = load_codec_decoder(CHECKPOINTS["base"], config)
    assert decoder.time_major and not plain.time_major
    convs = [m.conv.weight for m in decoder.modules() if isinstance(m, CausalConv1d) and m.conv.kernel_size[0] > 1]
    assert convs and all(w.transpose(1, 2).is_contiguous() for w in convs)
    codes = golden("codec")[0]["codec/codes/1"][None]
    with torch.inference_mode():
        torch.testing.assert_close(decoder(codes), plain(codes), atol=1e-5, rtol=0)
