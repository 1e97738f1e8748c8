"""Loading Qwen3-TTS parts from a checkpoint folder, with one error naming every mismatched tensor.

The released layout: ``model.safetensors`` (``talker.*``; Base checkpoints also ``speaker_encoder.*``) and
``speech_tokenizer/model.safetensors`` (``encoder.*``, the Mimi encoder; ``decoder.*``, the codec decoder). Each
part is built on the meta device and filled through :func:`anna_core.weights.safetensors_loader.load_safetensors`
(names and shapes verified before any tensor is read).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from anna_core.errors import ModelLoadError
from anna_core.weights.safetensors_loader import load_safetensors

from anna_audio.qwen3_tts.code_predictor import CodePredictor
from anna_audio.qwen3_tts.codec_decoder import CodecDecoder, phased_min_channels_for, time_major_for
from anna_audio.qwen3_tts.codec_encoder import CodecEncoder
from anna_audio.qwen3_tts.codec_encoder_config import load_codec_encoder_config
from anna_audio.qwen3_tts.config import Qwen3TTSConfig
from anna_audio.qwen3_tts.speaker_encoder import SpeakerEncoder
from anna_audio.qwen3_tts.talker import Talker

CODEC_DECODER_PREFIX = "decoder."
ENCODE_ONLY = (".rvq_first.input_proj.", ".rvq_rest.input_proj.")
"""Quantizer projections the decoder never reads (they map encoder features into the codebooks)."""
PREDICTOR_PREFIX = "talker.code_predictor."


def codec_decoder_name(name: str) -> str | None:
    """``speech_tokenizer/model.safetensors`` name -> :class:`CodecDecoder` parameter name (None: not the decoder's)."""
    if not name.startswith(CODEC_DECODER_PREFIX) or any(part in name for part in ENCODE_ONLY):
        return None
    return name[len(CODEC_DECODER_PREFIX):]


def predictor_name(name: str) -> str | None:
    """``model.safetensors`` name -> :class:`CodePredictor` parameter name (None: another part's)."""
    return name[len(PREDICTOR_PREFIX):] if name.startswith(PREDICTOR_PREFIX) else None


def load_codec_decoder(folder: str | Path, config: Qwen3TTSConfig, *, device: torch.device | str = "cpu",
                       dtype: torch.dtype = torch.float32, ops: Any = None) -> CodecDecoder:
    """The codec decoder of the checkpoint in ``folder``, in eval mode on ``device`` in ``dtype`` (``ops``: the
    kernel op table :class:`CodecDecoder` takes), in the layout :func:`time_major_for` picks for ``device``.

    Raises:
        ModelLoadError: ``folder/speech_tokenizer`` holds no weights, or its ``decoder.*`` tensors do not match the
            configured decoder (missing, unexpected, or mis-shaped tensors, all named).
    """
    with torch.device("meta"):
        decoder = CodecDecoder(config.codec.decoder, ops, time_major=time_major_for(device),
                               phased_min_channels=phased_min_channels_for(device)).to(dtype)
    load_safetensors(decoder, Path(folder) / "speech_tokenizer", codec_decoder_name, device=torch.device(device))
    return decoder.layout_weights().eval()


def load_code_predictor(folder: str | Path, config: Qwen3TTSConfig, *, device: torch.device | str = "cpu",
                        dtype: torch.dtype = torch.float32) -> CodePredictor:
    """The code predictor of the checkpoint in ``folder``, in eval mode on ``device`` in ``dtype``.

    Raises:
        ModelLoadError: ``folder`` holds no weights, or its ``talker.code_predictor.*`` tensors do not match the
            configured predictor (all offending tensors named).
    """
    with torch.device("meta"):
        predictor = CodePredictor(config.predictor, talker_hidden=config.talker.shape.hidden_size).to(dtype)
    load_safetensors(predictor, folder, predictor_name, device=torch.device(device))
    return predictor.eval()


TALKER_PREFIX = "talker."


def talker_name(name: str) -> str | None:
    """``model.safetensors`` name -> :class:`Talker` parameter name (None: the predictor's or another part's)."""
    if not name.startswith(TALKER_PREFIX) or name.startswith(PREDICTOR_PREFIX):
        return None
    return name[len(TALKER_PREFIX):]


def load_talker(folder: str | Path, config: Qwen3TTSConfig, *, device: torch.device | str = "cpu",
                dtype: torch.dtype = torch.float32) -> Talker:
    """The plain talker of the checkpoint in ``folder``, in eval mode on ``device`` in ``dtype``.

    Raises:
        ModelLoadError: ``folder`` holds no weights, or its ``talker.*`` tensors (the code predictor's aside) do not
            match the configured talker (all offending tensors named).
    """
    with torch.device("meta"):
        talker = Talker(config.talker).to(dtype)
    load_safetensors(talker, folder, talker_name, device=torch.device(device))
    return talker.eval()


SPEAKER_PREFIX = "speaker_encoder."


def speaker_encoder_name(name: str) -> str | None:
    """``model.safetensors`` name -> :class:`SpeakerEncoder` parameter name (None: another part's)."""
    return name[len(SPEAKER_PREFIX):] if name.startswith(SPEAKER_PREFIX) else None


def load_speaker_encoder(folder: str | Path, config: Qwen3TTSConfig, *, device: torch.device | str = "cpu",
                         dtype: torch.dtype = torch.float32) -> SpeakerEncoder:
    """The speaker encoder of the Base checkpoint in ``folder``, in eval mode on ``device`` in ``dtype``.

    Raises:
        ValueError: the checkpoint is not a Base one (no speaker encoder).
        ModelLoadError: its ``speaker_encoder.*`` tensors do not match the configuration (all named).
    """
    if config.speaker_encoder is None:
        raise ValueError(f"a {config.kind} checkpoint has no speaker encoder (Base checkpoints do)")
    with torch.device("meta"):
        encoder = SpeakerEncoder(config.speaker_encoder).to(dtype)
    load_safetensors(encoder, folder, speaker_encoder_name, device=torch.device(device))
    return encoder.eval()


CODEC_ENCODER_PREFIX = "encoder."
UNUSED_CODEBOOK_FLAG = ".codebook.initialized"
"""A codebook's training flag (``1.0`` once trained): it takes no part in encoding and is not loaded."""


def codec_encoder_name(name: str) -> str | None:
    """``speech_tokenizer/model.safetensors`` name -> :class:`CodecEncoder` parameter name (None: not the encoder's,
    or a codebook's ``initialized`` flag)."""
    if not name.startswith(CODEC_ENCODER_PREFIX) or name.endswith(UNUSED_CODEBOOK_FLAG):
        return None
    return name[len(CODEC_ENCODER_PREFIX):]


def load_codec_encoder(folder: str | Path, config: Qwen3TTSConfig, *, device: torch.device | str = "cpu",
                       dtype: torch.dtype = torch.float32) -> CodecEncoder:
    """The codec encoder of the checkpoint in ``folder`` (its settings read from
    ``folder/speech_tokenizer/config.json``), keeping ``config.codec.encoder_valid_num_quantizers`` codebooks, in
    eval mode on ``device`` in ``dtype``.

    Raises:
        ModelLoadError: the encoder's settings are missing or refused; they keep a number of codebooks other than
            the talker's, or codebooks of another size; ``folder/speech_tokenizer`` holds no weights, or its
            ``encoder.*`` tensors do not match the configured encoder (missing, unexpected, or mis-shaped tensors,
            all named).
    """
    encoder_config = load_codec_encoder_config(folder)
    kept = config.codec.encoder_valid_num_quantizers
    if kept != config.talker.num_code_groups:
        raise ModelLoadError(f"the codec's encoder keeps {kept} codebooks, the talker takes "
                             f"{config.talker.num_code_groups}")
    if encoder_config.codebook_size != config.codec.decoder.codebook_size:
        raise ModelLoadError(f"the codec's encoder codebooks hold {encoder_config.codebook_size} entries, its "
                             f"decoder's {config.codec.decoder.codebook_size}")
    with torch.device("meta"):
        encoder = CodecEncoder(encoder_config, kept).to(dtype)
    load_safetensors(encoder, Path(folder) / "speech_tokenizer", codec_encoder_name, device=torch.device(device))
    return encoder.eval()
