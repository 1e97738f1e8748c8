"""The Qwen3-ASR family loader: ``config.json`` (either layout) + safetensors, or dummy weights -> :class:`LoadedModel`
with the audio :class:`~anna_audio.qwen3_asr.processor.Qwen3ASRProcessor`."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from anna_core.errors import ModelLoadError
from anna_core.generation_config import read_generation_defaults
from anna_core.kernels.registry import KernelRegistry, bind_ops
from anna_core.layers.linear import use_linear_op
from anna_core.model import LoadedModel
from anna_core.model_dir import ModelSource
from anna_core.tokenizer import Tokenizer
from anna_core.weights.safetensors_loader import (
    cast_meta_params,
    load_safetensors,
    materialize_dummy,
)

from anna_audio.features import PREPROCESSOR_CONFIG, LogMelFeatures
from anna_audio.qwen3_asr.config import Qwen3ASRConfig
from anna_audio.qwen3_asr.model import (
    DEFAULT_MAX_ENCODER_BATCH,
    Qwen3ASRModel,
    build_encoder,
    materialize_encoder_buffers,
)
from anna_audio.qwen3_asr.processor import Qwen3ASRProcessor
from anna_audio.qwen3_asr.weights import name_map

log = logging.getLogger("anna.qwen3_asr")

LOAD_FORMATS = ("auto", "safetensors", "dummy")
PROCESSOR_TEMPLATES = ("chat_template.jinja", "chat_template.json")
"""Files a checkpoint may keep its (processor's) chat template in when the tokenizer carries none."""


def build_model(cfg: Qwen3ASRConfig, ops: Any, dtype: torch.dtype, max_encoder_batch: int,
                features: LogMelFeatures) -> Qwen3ASRModel:
    """The model on the meta device (no memory), parameters in ``dtype``."""
    with torch.device("meta"):
        model = Qwen3ASRModel(cfg, ops, build_encoder(cfg), features, max_encoder_batch)
    cast_meta_params(model, dtype)
    return model


def load(source: ModelSource, *, device: torch.device, dtype: torch.dtype, load_format: str = "auto",
         kernels: KernelRegistry, chat_template: str | None = None, weight_quant: str = "auto",
         asr_max_inference_batch_size: int = DEFAULT_MAX_ENCODER_BATCH) -> LoadedModel:
    """Load a Qwen3-ASR checkpoint (``Qwen3ASRForConditionalGeneration``, the ``hf`` or the original layout).

    Args:
        source: from :func:`anna_core.model_dir.inspect_model_dir` (a safetensors folder).
        device, dtype: where and in which dtype to serve (encoder, projector and decoder alike).
        load_format: ``"auto"`` / ``"safetensors"``, or ``"dummy"`` (random weights; the folder may hold only
            ``config.json``: the features then use the released extractor settings and, without a tokenizer,
            prompts are token ids).
        kernels: the kernel registry the decoder's ops are bound from.
        chat_template: overrides the checkpoint's chat template.
        weight_quant: ``"auto"`` or ``"none"`` (both keep the weights dense).
        asr_max_inference_batch_size: the most audios one encoder call takes (a family load option:
            ``load_model(..., family_options={"asr_max_inference_batch_size": n})``, the server's
            ``--asr-max-inference-batch-size``); a step with more new audios runs the encoder several times.

    Raises:
        ModelLoadError: a load format or weight quantization it does not implement, a GGUF, a bad config, missing /
            unexpected / mis-shaped tensors (in either layout), no tokenizer, an unreadable preprocessor config,
            a non-positive ``asr_max_inference_batch_size``.
        UnsupportedModelError: a forced-aligner checkpoint, an activation other than GELU, sliding-window layers.
    """
    if load_format not in LOAD_FORMATS:
        raise ModelLoadError(f"load format {load_format!r} is not supported by the Qwen3-ASR family; use one of "
                             f"{LOAD_FORMATS}")
    if source.format != "safetensors":
        raise ModelLoadError(f"the Qwen3-ASR family loads safetensors checkpoints; {str(source.root)!r} holds "
                             f"{source.format} weights")
    if weight_quant not in ("auto", "none"):
        raise ModelLoadError(f"--weight-quant {weight_quant} is not implemented for Qwen3-ASR; use auto or none")
    if isinstance(asr_max_inference_batch_size, bool) or not isinstance(asr_max_inference_batch_size, int) \
            or asr_max_inference_batch_size < 1:
        raise ModelLoadError(f"asr_max_inference_batch_size must be a positive integer, got "
                             f"{asr_max_inference_batch_size!r}")
    cfg = Qwen3ASRConfig.from_hf(source.config)
    ops = bind_ops(kernels, device, dtype)
    features = _features(source.root, cfg)
    model = build_model(cfg, ops, dtype, asr_max_inference_batch_size, features)
    if load_format == "dummy":
        materialize_dummy(model, device=device, init=_dummy_init)
    else:
        load_safetensors(model, source.root, name_map(cfg.layout, cfg.text.tie_word_embeddings), device=device)
    materialize_encoder_buffers(model.audio_tower, torch.device(device))
    model.raw_config = source.config
    model.merge_projections()
    use_linear_op(model.model, ops)
    use_linear_op(model.multi_modal_projector, ops)
    tokenizer = Tokenizer.from_folder(source.root, chat_template, required=load_format != "dummy")
    if tokenizer is not None and chat_template is None and not tokenizer.has_chat_template:
        _processor_template(source.root, tokenizer)
    generation = read_generation_defaults(source.root, config_eos=list(cfg.eos_token_id) or None, tokenizer=tokenizer)
    log.info("loaded Qwen3-ASR (%s layout; encoder %d layers of width %d; decoder %d layers, %d/%d heads) on %s/%s",
             cfg.layout, cfg.encoder.kwargs.get("encoder_layers", 0), cfg.encoder.d_model, cfg.text.num_hidden_layers,
             cfg.text.num_attention_heads, cfg.text.num_key_value_heads, device, dtype)
    loaded = LoadedModel(model=model.eval(), tokenizer=tokenizer, generation=generation,
                         max_model_len=cfg.text.max_position_embeddings, family="qwen3_asr", dtype=dtype,
                         device=torch.device(device))
    loaded.processor = Qwen3ASRProcessor(features, cfg.audio_token_id)
    return loaded


def _features(root: Path, cfg: Qwen3ASRConfig) -> LogMelFeatures:
    """The checkpoint's feature extractor (its ``preprocessor_config.json``), or the released settings without one.

    Raises:
        ModelLoadError: an unreadable preprocessor config, or one whose mel bins differ from the encoder's.
    """
    if (Path(root) / PREPROCESSOR_CONFIG).is_file():
        try:
            features = LogMelFeatures.from_checkpoint(root, cfg.encoder.n_window)
        except (OSError, ValueError, TypeError) as exc:
            raise ModelLoadError(f"cannot read {str(Path(root) / PREPROCESSOR_CONFIG)!r}: {exc}") from exc
    else:
        log.info("%s has no %s: using the released Qwen3-ASR feature settings", root, PREPROCESSOR_CONFIG)
        features = LogMelFeatures(n_window=cfg.encoder.n_window)
    if features.num_mel_bins != cfg.encoder.num_mel_bins:
        raise ModelLoadError(f"{PREPROCESSOR_CONFIG} makes {features.num_mel_bins} mel bins but the encoder takes "
                             f"{cfg.encoder.num_mel_bins}")
    return features


def _processor_template(root: Path, tokenizer: Tokenizer) -> None:
    """Give ``tokenizer`` the processor's chat template of the checkpoint (``chat_template.jinja``, or the
    ``chat_template`` of ``chat_template.json``), where the release keeps it apart from the tokenizer.

    Raises:
        ModelLoadError: a ``chat_template.json`` that is not JSON with a ``chat_template`` string.
    """
    import json

    for name in PROCESSOR_TEMPLATES:
        path = Path(root) / name
        if not path.is_file():
            continue
        if name.endswith(".jinja"):
            tokenizer.hf.chat_template = path.read_text()
            return
        try:
            template = json.loads(path.read_text())["chat_template"]
        except (ValueError, KeyError, TypeError) as exc:
            raise ModelLoadError(f"{str(path)!r} holds no chat_template string: {exc}") from exc
        if not isinstance(template, str):
            raise ModelLoadError(f"{str(path)!r}: chat_template must be a string")
        tokenizer.hf.chat_template = template
        return


def _dummy_init(name: str, value: torch.Tensor, gen: torch.Generator | None) -> bool:
    if name.startswith("audio_tower.") and "layer_norm" in name or name.startswith("audio_tower.ln_post"):
        value.fill_(1.0 if name.endswith("weight") else 0.0)  # LayerNorm scales (zeros would blank the rows)
        return True
    return False
