"""The Qwen3-ASR model on Anna's engine: transformers' audio encoder, a two-layer projector, and the Qwen3 text
decoder of :mod:`anna_qwen35.qwen3` with the projected audio rows spliced in at the audio placeholders (Qwen Team,
"Qwen3-ASR Technical Report", 2026).

The decoder is :class:`anna_qwen35.qwen3.model.Qwen3ForCausalLM` itself (its layers, paged KV cache, fused
kernels and graphs), so transcriptions batch in the engine like any prompts; only the token embeddings differ: the
rows of ``<|audio_pad|>`` tokens are replaced by the encoder's (:func:`anna_core.layers.media.splice_media`).
"""

from __future__ import annotations

from typing import Any

import torch
from anna_core.engine.forward_batch import ForwardBatch
from anna_core.layers.media import splice_media
from anna_core.model import ModelCaches, ModelCapabilities
from anna_core.multimodal import MediaItem
from anna_qwen35.qwen3.model import Qwen3ForCausalLM
from torch import nn

from anna_audio.features import LogMelFeatures
from anna_audio.qwen3_asr import encoder_input
from anna_audio.qwen3_asr.config import Qwen3ASRConfig

DEFAULT_MAX_ENCODER_BATCH = 32
"""Audios per encoder call unless the loader is told otherwise (``asr_max_inference_batch_size``; upstream
``qwen-asr``'s ``max_inference_batch_size`` default)."""


class AudioProjector(nn.Module):
    """``linear_2(gelu(linear_1(x)))``: encoder rows ``[N, d_model]`` -> decoder-width rows ``[N, output_dim]``
    (GELU with the exact erf, as transformers' ``"gelu"``). Parameters ``linear_1`` ``[d_model, d_model]``,
    ``linear_2`` ``[output_dim, d_model]``, both with biases."""

    def __init__(self, d_model: int, output_dim: int):
        super().__init__()
        self.linear_1 = nn.Linear(d_model, d_model)
        self.linear_2 = nn.Linear(d_model, output_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(nn.functional.gelu(self.linear_1(x)))


def build_encoder(cfg: Qwen3ASRConfig) -> nn.Module:
    """transformers' ``Qwen3ASREncoder`` for ``cfg`` (SDPA attention), built on the current default device; its
    sinusoid position table is a non-persistent buffer, so a meta-built encoder needs
    :func:`materialize_encoder_buffers` once its weights are loaded."""
    from transformers import Qwen3ASREncoderConfig
    from transformers.models.qwen3_asr.modeling_qwen3_asr import Qwen3ASREncoder

    return Qwen3ASREncoder(Qwen3ASREncoderConfig(**cfg.encoder.kwargs, attn_implementation="sdpa")).eval()


def materialize_encoder_buffers(encoder: nn.Module, device: torch.device) -> None:
    """Recompute the encoder's sinusoid position table (a buffer no checkpoint holds) on ``device``."""
    table = encoder.positional_embedding
    with torch.device("cpu"):
        encoder.positional_embedding = type(table)(table.length, table.channels, table.max_timescale).to(device)


class Qwen3ASRModel(Qwen3ForCausalLM):
    """Implements :class:`anna_core.model.CausalLM` for Qwen3-ASR, with ``modalities=("audio",)``.

    Args:
        cfg: the checkpoint's hyper-parameters.
        ops: the decoder's :class:`anna_core.kernels.OpTable`.
        encoder: the audio encoder (:func:`build_encoder`), parameters ``audio_tower.*``.
        features: the log-mel features of the checkpoint (:class:`anna_audio.features.LogMelFeatures`), computed
            per encoder call on the model's device.
        max_encoder_batch: the most audios one encoder call takes (``asr_max_inference_batch_size``); a step that
            encodes more runs the encoder several times.

    Raises:
        ValueError: ``max_encoder_batch`` not positive, or features of another mel count than the encoder's.
    """

    def __init__(self, cfg: Qwen3ASRConfig, ops: Any, encoder: nn.Module, features: LogMelFeatures,
                 max_encoder_batch: int = DEFAULT_MAX_ENCODER_BATCH):
        if max_encoder_batch < 1:
            raise ValueError(f"max_encoder_batch must be positive, got {max_encoder_batch}")
        if features.num_mel_bins != cfg.encoder.num_mel_bins:
            raise ValueError(f"the features have {features.num_mel_bins} mel bins, the encoder takes "
                             f"{cfg.encoder.num_mel_bins}")
        super().__init__(cfg.text, ops)
        self.features = features
        self.asr_config = cfg
        self.audio_tower = encoder
        self.multi_modal_projector = AudioProjector(cfg.encoder.d_model, cfg.encoder.output_dim)
        self.max_encoder_batch = max_encoder_batch
        self.capabilities = ModelCapabilities(padded_prefill=True, modalities=("audio",))

    def forward(self, batch: ForwardBatch, caches: ModelCaches) -> torch.Tensor:
        """Hidden states ``[T, hidden]`` (after the final norm), audio rows spliced in at their placeholders."""
        return self.model(splice_media(self.model.embed_tokens(batch.input_ids), batch), batch, caches)

    @torch.inference_mode()
    def encode(self, items: list[MediaItem]) -> list[torch.Tensor]:
        """The projected encoder rows of each audio: ``[item.length, hidden]`` in the serving dtype, on the model's
        device, the audios run in the groups of :meth:`encoder_groups` (at most ``max_encoder_batch`` a call).

        Each item's ``data`` is the processor's ``{"samples": [N] float32, "num_frames": int}``
        (:class:`anna_audio.qwen3_asr.processor.Qwen3ASRProcessor`); a group's log-mel features are computed together
        on the model's device (:meth:`~anna_audio.features.LogMelFeatures.batch`: ``[n_mels, F]`` float32 a clip), the
        frames padded with zeros to the longest ``F`` and masked past ``num_frames``, which leaves each clip's rows as
        it has alone (the encoder attends within each clip's windows only).

        Raises:
            ValueError: an item whose rows differ from its placeholder count, or whose frame count differs from its
                samples'.
        """
        weight = self.model.embed_tokens.weight
        out: list[torch.Tensor] = []
        for group in self.encoder_groups(items):
            out += self._encode_group(group, weight.device, weight.dtype)
        return out

    def encoder_groups(self, items: list[MediaItem]) -> list[list[MediaItem]]:
        """``items`` in order, cut into groups: at most ``max_encoder_batch`` audios and, unless one audio alone is
        longer, at most ``conv_chunksize`` convolution chunks of ``2 * n_window`` frames (the padded frames of each
        clip's features). A group is one encoder call; an audio alone over the budget is encoded in window-aligned
        segments, a call per budget's worth (:meth:`_encode_group`)."""
        enc = self.asr_config.encoder
        budget = enc.conv_chunksize * 2 * enc.n_window
        groups: list[list[MediaItem]] = []
        frames = 0
        for item in items:
            size = self.features.padded_frames(item.data["num_frames"])
            if groups and len(groups[-1]) < self.max_encoder_batch and frames + size <= budget:
                groups[-1].append(item)
                frames += size
            else:
                groups.append([item])
                frames = size
        return groups

    def _encode_group(self, group: list[MediaItem], device: torch.device, dtype: torch.dtype) -> list[torch.Tensor]:
        """One group's rows: its features computed together, then one encoder call, or, for one clip longer than the
        convolution budget, one call per window-aligned segment of it as long as the budget allows
        (:mod:`anna_audio.qwen3_asr.encoder_input`: the same rows with bounded activation memory)."""
        feats = self.features.batch([m.data["samples"] for m in group], device)
        bad = [(f.num_frames, m.data["num_frames"]) for f, m in zip(feats, group)
               if f.num_frames != m.data["num_frames"]]
        if bad:
            raise ValueError(f"audio samples give other frame counts than their items name: {bad}")
        enc = self.asr_config.encoder
        budget = enc.conv_chunksize * 2 * enc.n_window
        size = encoder_input.segment_frames(budget, int(self.audio_tower.n_window_infer), 2 * enc.n_window)
        if len(group) == 1 and feats[0].features.shape[1] > budget and size is not None:
            calls = [[piece] for piece in encoder_input.segments(feats[0], size)]
        else:
            calls = [[(f.features, f.num_frames) for f in feats]]
        rows = torch.cat([self._run_encoder(call, device, dtype) for call in calls])  # [sum L, d_model]
        lengths = [m.length for m in group]
        if rows.shape[0] != sum(lengths):
            raise ValueError(f"the audio encoder gave {rows.shape[0]} rows for {sum(lengths)} audio placeholders")
        return list(torch.split(self.multi_modal_projector(rows).to(dtype), lengths))

    def _run_encoder(self, pieces: list[encoder_input.Piece], device: torch.device, dtype: torch.dtype
                     ) -> torch.Tensor:
        x, mask = encoder_input.batch(pieces, self.asr_config.encoder.num_mel_bins, device, dtype)
        return self.audio_tower(input_features=x, input_features_mask=mask).last_hidden_state

    def hf_export(self) -> tuple[str, str, dict[str, Any], dict[str, torch.Tensor]]:
        """The text decoder alone as transformers' ``Qwen3ForCausalLM`` (``anna bench --compare-hf``): see
        :meth:`Qwen3ForCausalLM.hf_export`; the encoder and projector tensors are left out."""
        name, config_name, _, state = super().hf_export()
        kwargs = {k: v for k, v in self.asr_config.text_config.items() if k not in ("model_type", "architectures")}
        kwargs["tie_word_embeddings"] = self.config.tie_word_embeddings
        return name, config_name, kwargs, {k: v for k, v in state.items() if k.startswith(("model.", "lm_head."))}
