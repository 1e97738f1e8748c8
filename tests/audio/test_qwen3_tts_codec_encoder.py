"""The 12 Hz codec encoder (:mod:`anna_audio.qwen3_tts.codec_encoder`) against the reference's golden outputs: each
stage of the encoding path, codes of a padded batch and of a waveform alone, codes with a transformer window
shorter than the audio, and the errors of bad waveforms, settings and checkpoints."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from anna_audio.qwen3_tts import load_config
from anna_audio.qwen3_tts.codec_encoder import CodecEncoder
from anna_audio.qwen3_tts.codec_encoder_config import parse_codec_encoder
from anna_audio.qwen3_tts.weights import codec_encoder_name, load_codec_encoder
from anna_core.errors import ModelLoadError
from anna_core.weights.safetensors_loader import load_safetensors

from tests.audio.tts_golden import CHECKPOINTS, golden

STAGE_ATOL = 1e-5
"""Largest difference allowed on the float stages (float32 on the CPU; seen: 0)."""


@pytest.fixture(scope="module")
def encoder():
    tensors, facts = golden("codec")
    base, _ = golden("base")
    config = load_config(CHECKPOINTS["base"])
    return load_codec_encoder(CHECKPOINTS["base"], config), tensors, facts, base["ref/audio"]


def test_stages_match_reference(encoder):
    enc, g, _, audio = encoder
    with torch.inference_mode():
        conv = enc.encoder(audio[None, None])
        transformed = enc.encoder_transformer(conv.transpose(1, 2))
        downsampled = enc.downsample(transformed.transpose(1, 2))
    assert conv.shape == (1, 16, 30) and downsampled.shape == (1, 16, 15)
    torch.testing.assert_close(conv[0], g["encoder/stage/conv"], atol=STAGE_ATOL, rtol=0)
    torch.testing.assert_close(transformed[0], g["encoder/stage/transformer"], atol=STAGE_ATOL, rtol=0)
    torch.testing.assert_close(downsampled[0], g["encoder/stage/downsampled"], atol=STAGE_ATOL, rtol=0)


def test_codes_match_reference(encoder):
    enc, g, facts, audio = encoder
    cut = facts["encoder"]["samples"][1]
    batch = enc.encode([audio, audio[:cut]])
    assert [c.shape[0] for c in batch] == facts["encoder"]["frames"] == [15, 8]
    for i, codes in enumerate(batch):
        assert codes.dtype == torch.int64 and codes.shape[1] == 4
        assert torch.equal(codes, g[f"encoder/codes/{i}"]), f"row {i}"
    (alone,) = enc.encode([audio[:cut]])
    assert torch.equal(alone, g["encoder/alone/1"])
    # the padding of the batch reaches the cut's last frame through the convolutions' biases, as in the reference
    assert torch.equal(alone[:-1], batch[1][:-1]) and not torch.equal(alone, batch[1])
    assert len({int(v) for v in batch[0].flatten()}) > 8  # codes, not one entry repeated


def test_window_shorter_than_audio(encoder):
    """A transformer window of 4 frames (the 1.2 s audio has 30): codes equal the reference's with that window."""
    _, g, facts, audio = encoder
    codec = json.loads((CHECKPOINTS["base"] / "speech_tokenizer" / "config.json").read_text())
    codec["encoder_config"]["sliding_window"] = facts["encoder"]["window"]
    with torch.device("meta"):
        narrow = CodecEncoder(parse_codec_encoder(codec), 4)
    load_safetensors(narrow, CHECKPOINTS["base"] / "speech_tokenizer", codec_encoder_name, device=torch.device("cpu"))
    (codes,) = narrow.eval().encode([audio])
    assert torch.equal(codes, g["encoder/window/codes"])
    assert not torch.equal(codes, g["encoder/codes/0"])  # the window binds


@pytest.mark.parametrize("waves, message", [
    ([], "at least one waveform"),
    ([torch.zeros(2, 100)], r"waveform 0 must be \[N\]"),
    ([torch.zeros(100), torch.zeros(0)], r"waveform 1 must be \[N\] with N >= 1"),
    ([torch.tensor([0.0, float("nan")])], "NaN or infinite"),
])
def test_bad_waveforms(encoder, waves, message):
    enc = encoder[0]
    with pytest.raises(ValueError, match=message):
        enc.encode(waves)


def _edited_checkpoint(tmp_path, edit_weights=None, edit_config=None):
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "ckpt"
    shutil.copytree(CHECKPOINTS["base"], folder)
    if edit_weights is not None:
        path = folder / "speech_tokenizer" / "model.safetensors"
        tensors = load_file(str(path))
        edit_weights(tensors)
        save_file(tensors, str(path))
    if edit_config is not None:
        path = folder / "speech_tokenizer" / "config.json"
        config = json.loads(path.read_text())
        edit_config(config)
        path.write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.pop("encoder.downsample.conv.weight"), r"missing tensors .*'downsample\.conv\.weight'"),
    (lambda t: t.pop("encoder.quantizer.acoustic_residual_vector_quantizer.layers.6.codebook.embed_sum"),
     r"missing tensors .*layers\.6\.codebook\.embed_sum"),
    (lambda t: t.update({"encoder.extra.weight": torch.zeros(1)}), r"unexpected tensors .*'encoder\.extra\.weight'"),
    (lambda t: t.update({"encoder.encoder.layers.3.conv.weight": torch.zeros(8, 4, 6)}),
     r"shape mismatches: .*encoder\.encoder\.layers\.3\.conv\.weight"),
])
def test_load_weight_errors(tmp_path, edit, message):
    golden("codec")
    folder = _edited_checkpoint(tmp_path, edit_weights=edit)
    with pytest.raises(ModelLoadError, match=message):
        load_codec_encoder(folder, load_config(folder))


@pytest.mark.parametrize("edit, message", [
    (lambda c: c.pop("encoder_config"), "encoder_config is missing"),
    (lambda c: c["encoder_config"].update(upsampling_ratios=[8, 6, 5, 2]), "not encode_downsample_rate 1920"),
    (lambda c: c["encoder_config"].update(pad_mode="reflect"), "pad_mode 'reflect' is not supported"),
    (lambda c: c["encoder_config"].update(use_causal_conv=False), "only the causal encoder"),
    (lambda c: c["encoder_config"].update(num_key_value_heads=3), "do not group"),
    (lambda c: c["encoder_config"].update(hidden_size="16"), r"hidden_size must be int"),
    (lambda c: c["encoder_config"].update(sampling_rate=16000), "differs from input_sample_rate"),
    (lambda c: c.update(encoder_valid_num_quantizers=9), r"outside \[1, 8\]"),
    (lambda c: c.update(encoder_valid_num_quantizers=3), "keeps 3 codebooks, the talker takes 4"),
])
def test_load_config_errors(tmp_path, edit, message):
    golden("codec")
    folder = _edited_checkpoint(tmp_path, edit_config=edit)
    with pytest.raises(ModelLoadError, match=message):
        load_codec_encoder(folder, load_config(folder))
