"""The ``qwen3_tts`` family's loader: a Qwen3-TTS 12 Hz checkpoint (Base, CustomVoice, VoiceDesign) -> a
:class:`~anna_core.model.LoadedModel` whose model is the engine's talker (:class:`TalkerLM`) and whose ``processor``
is the :class:`SpeechParts` the ``speech`` task needs besides it (tokenizer, prompt builder, codec decoder)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import attrs
import torch
from anna_core.errors import ModelLoadError
from anna_core.kernels.registry import KernelRegistry, bind_ops
from anna_core.model import GenerationDefaults, LoadedModel
from anna_core.model_dir import ModelSource
from anna_core.tokenizer import Tokenizer
from anna_core.weights.safetensors_loader import materialize_dummy

from anna_audio.qwen3_tts.code_predictor import CodePredictor
from anna_audio.qwen3_tts.codec_decoder import CodecDecoder, phased_min_channels_for, time_major_for
from anna_audio.qwen3_tts.config import Qwen3TTSConfig, load_config
from anna_audio.qwen3_tts.sampling import SpeechSampling, load_sampling
from anna_audio.qwen3_tts.talker import Talker
from anna_audio.qwen3_tts.talker_lm import TalkerLM
from anna_audio.qwen3_tts.voice import control_tokens
from anna_audio.qwen3_tts.voice_clone import RecordingCloner, load_voice_cloner
from anna_audio.qwen3_tts.weights import load_code_predictor, load_codec_decoder, load_talker

log = logging.getLogger("anna.qwen3_tts")

LOAD_FORMATS = ("auto", "safetensors", "dummy")


@attrs.define
class SpeechParts:
    """What the ``speech`` task needs besides the engine's talker (``LoadedModel.processor`` of the family; it takes
    no media from clients: ``modalities`` is empty).

    Attributes:
        config: the checkpoint's configuration.
        talker / predictor: the plain modules whose weights the engine's talker uses (prompt embeddings).
        codec_decoder: codes -> 24 kHz waveform.
        tokenizer: the checkpoint's text tokenizer (None for a dummy load without one).
        sampling: the checkpoint's ``generation_config.json`` defaults.
        cloner: a Base checkpoint's :class:`~anna_audio.qwen3_tts.voice.VoiceCloner` (reference audio -> x-vector and
            codes: :class:`~anna_audio.qwen3_tts.voice_clone.RecordingCloner`, its speaker and codec encoders in
            float32 on the device), or None (other kinds, and dummy loads): voice cloning then answers a 400 saying
            what is missing.
    """

    config: Qwen3TTSConfig
    talker: Talker
    predictor: CodePredictor
    codec_decoder: CodecDecoder
    tokenizer: Tokenizer | None
    sampling: SpeechSampling
    cloner: Any = None
    modalities: tuple[str, ...] = ()

    @property
    def sample_rate(self) -> int:
        return self.config.codec.output_sample_rate


def _dummy_init(name: str, value: torch.Tensor, generator: torch.Generator | None) -> bool:
    """Norm weights and layer scales at their identity, so random activations stay finite."""
    if value.dim() == 1 and (name.endswith("norm.weight") or name.endswith(".scale")):
        value.fill_(1.0)
        return True
    return False


def _dummy(build: Any, device: torch.device, dtype: torch.dtype) -> Any:
    with torch.device("meta"):
        module = build().to(dtype)
    materialize_dummy(module, device=device, init=_dummy_init)
    return module.eval()


def _max_positions(raw: dict[str, Any]) -> int:
    """The talker's ``max_position_embeddings`` (the reference's default 32768 when absent)."""
    value = (raw.get("talker_config") or {}).get("max_position_embeddings", 32768)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ModelLoadError(f"talker_config.max_position_embeddings must be a positive integer, got {value!r}")
    return value


def load(source: ModelSource, *, device: torch.device, dtype: torch.dtype, load_format: str = "auto",
         kernels: KernelRegistry, chat_template: str | None = None, weight_quant: str = "auto") -> LoadedModel:
    """Load a Qwen3-TTS 12 Hz checkpoint for the ``speech`` task.

    Args:
        source: the checkpoint folder (``config.json``, ``model.safetensors``, ``speech_tokenizer/``).
        device, dtype: where and in which dtype to serve (talker, code predictor and codec decoder alike).
        load_format: ``"auto"`` / ``"safetensors"``, or ``"dummy"`` (random weights; the folder may hold only the
            two config files).
        kernels: the registry the talker's, code predictor's and codec decoder's ops are bound from.
        chat_template: unused (speech prompts are the reference's fixed wrappings).
        weight_quant: ``"auto"`` or ``"none"`` (weights stay dense).

    Raises:
        ModelLoadError: another load format or weight quantization, a non-safetensors folder, a bad config, missing /
            unexpected / mis-shaped tensors, no tokenizer (except dummy loads).
    """
    if load_format not in LOAD_FORMATS:
        raise ModelLoadError(f"load format {load_format!r} is not supported by the Qwen3-TTS family; use one of "
                             f"{LOAD_FORMATS}")
    if weight_quant not in ("auto", "none"):
        raise ModelLoadError(f"--weight-quant {weight_quant} is not implemented for Qwen3-TTS; use auto or none")
    if source.format != "safetensors" and load_format != "dummy":
        raise ModelLoadError(f"the Qwen3-TTS family loads safetensors checkpoints; {str(source.root)!r} holds "
                             f"{source.format} weights")
    device = torch.device(device)
    root = Path(source.root)
    config = load_config(root)
    ops = bind_ops(kernels, device, dtype)
    if load_format == "dummy":
        talker = _dummy(lambda: Talker(config.talker), device, dtype)
        predictor = _dummy(lambda: CodePredictor(config.predictor, config.talker.shape.hidden_size), device, dtype)
        decoder = _dummy(lambda: CodecDecoder(config.codec.decoder, ops, time_major=time_major_for(device),
                                              phased_min_channels=phased_min_channels_for(device)), device,
                         dtype).layout_weights()
    else:
        talker = load_talker(root, config, device=device, dtype=dtype)
        predictor = load_code_predictor(root, config, device=device, dtype=dtype)
        decoder = load_codec_decoder(root, config, device=device, dtype=dtype, ops=ops)
    sampling = load_sampling(root)
    tokenizer = Tokenizer.from_folder(root, required=load_format != "dummy")
    cloner = None
    if config.accepts_reference_audio and load_format != "dummy":  # Base: the speaker and codec encoders, float32
        cloner = RecordingCloner(load_voice_cloner(root, config, tokenizer.encode, control=control_tokens(tokenizer),
                                                   device=device))
    model = TalkerLM(config, talker, predictor, ops, predictor_sampling=sampling.predictor)
    s = config.talker.shape
    log.info("loaded Qwen3-TTS %s (%s; talker %d layers of width %d, %d codebooks) on %s/%s", config.kind,
             config.model_size, s.num_layers, s.hidden_size, config.talker.num_code_groups, device, dtype)
    return LoadedModel(model=model.eval(), tokenizer=tokenizer,
                       generation=GenerationDefaults(eos_token_ids=[config.talker.ids.eos]),
                       max_model_len=_max_positions(source.config), family="qwen3_tts", dtype=dtype,
                       device=device,
                       processor=SpeechParts(config, talker, predictor, decoder, tokenizer, sampling, cloner))
