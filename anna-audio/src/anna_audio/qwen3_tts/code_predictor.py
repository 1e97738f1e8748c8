"""The code predictor: fills codebooks ``1 .. G-1`` of a frame after the talker chose codebook 0.

Math after the reference (QwenLM/Qwen3-TTS ``qwen_tts/core/models/modeling_qwen3_tts.py``:
``Qwen3TTSTalkerCodePredictorModelForConditionalGeneration`` and its model, layers and attention, driven by the
talker's ``forward`` through ``generate``). Per frame it runs a short causal sequence:

* position 0: the talker's last hidden state (the one whose head chose codebook 0), position 1: the talker's
  codec embedding of that code; both ``[H_talker]``, projected to the predictor's width by
  ``small_to_mtp_projection`` (a linear with bias; absent when the widths agree);
* ``lm_head[0]`` on position 1 gives codebook 1; then for ``g = 1 .. G-2`` the code of codebook ``g`` enters through
  ``codec_embedding[g - 1]`` (``[vocab, H_talker]``, projected too) and ``lm_head[g]`` gives codebook ``g + 1``.

Layers are Qwen3's (:class:`~anna_audio.qwen3_tts.decoder_layer.Qwen3Layer`), at rotary positions 0, 1, 2, ...
Parameter names follow the checkpoint's ``talker.code_predictor.*``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from anna_core.layers.rotary import RotaryEmbedding
from torch import nn

from anna_audio.qwen3_tts.config import CodePredictorConfig
from anna_audio.qwen3_tts.decoder_layer import KV, Qwen3Layer, run_layers
from anna_audio.qwen3_tts.layers import RMSNorm

Choose = Callable[[torch.Tensor, int], torch.Tensor]
"""``(logits [B, vocab] float32, codebook g) -> codes [B]``: how a code is picked from a head's logits."""


def greedy(logits: torch.Tensor, codebook: int) -> torch.Tensor:
    """The highest-scoring code of each row (the reference with ``subtalker_dosample=False``)."""
    return logits.argmax(dim=-1)


class PredictorModel(nn.Module):
    """Parameters (checkpoint ``talker.code_predictor.model.*``): layers, norm, codec_embedding ``G-1 x [vocab,
    H_talker]``."""

    def __init__(self, config: CodePredictorConfig, talker_hidden: int) -> None:
        super().__init__()
        s = config.shape
        self.rotary = RotaryEmbedding(s.head_dim, s.head_dim, {"rope_type": "default", "rope_theta": s.rope_theta})
        self.layers = nn.ModuleList([Qwen3Layer(config.shape, self.rotary) for _ in range(s.num_layers)])
        self.norm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.codec_embedding = nn.ModuleList([nn.Embedding(config.vocab_size, talker_hidden)
                                              for _ in range(config.num_code_groups - 1)])


class CodePredictor(nn.Module):
    """Codebooks ``1 .. G-1`` of frames, given the talker's hidden state and codebook-0 embedding of each.

    Args:
        config: the predictor's configuration.
        talker_hidden: the talker's width ``H_talker`` (its hidden states and codec embeddings).

    Parameters (checkpoint ``talker.code_predictor.*``): ``model.*`` (:class:`PredictorModel`), ``lm_head.<g>.weight``
    ``[vocab, D]`` for ``g < G-1``, ``small_to_mtp_projection.{weight, bias}`` ``[D, H_talker]`` when ``D !=
    H_talker``.
    """

    def __init__(self, config: CodePredictorConfig, talker_hidden: int) -> None:
        super().__init__()
        self.config = config
        self.talker_hidden = talker_hidden
        s = config.shape
        self.model = PredictorModel(config, talker_hidden)
        self.lm_head = nn.ModuleList([nn.Linear(s.hidden_size, config.vocab_size, bias=False)
                                      for _ in range(config.num_code_groups - 1)])
        self.small_to_mtp_projection = (nn.Linear(talker_hidden, s.hidden_size) if s.hidden_size != talker_hidden
                                        else nn.Identity())

    def _run(self, x: torch.Tensor, start: int, cache: list[KV]) -> torch.Tensor:
        """x: ``[B, T, H_talker]`` at positions ``start ..``; extends ``cache``; -> last position's hidden ``[B, D]``."""
        h = run_layers(self.model.layers, self.model.rotary, self.small_to_mtp_projection(x), start, cache)
        return self.model.norm(h[:, -1])

    def forward(self, talker_hidden: torch.Tensor, first_code_embed: torch.Tensor, choose: Choose = greedy,
                logits_out: list[torch.Tensor] | None = None) -> torch.Tensor:
        """Predict one frame's codebooks ``1 .. G-1`` for each row.

        Args:
            talker_hidden: ``[B, H_talker]``, the talker's final hidden state that produced codebook 0.
            first_code_embed: ``[B, H_talker]``, the talker's codec embedding of that code.
            choose: picks a code from a head's logits (default :func:`greedy`).
            logits_out: when given, each head's ``[B, vocab]`` float32 logits are appended to it.

        Returns:
            ``[B, G-1]`` int64 codes.

        Raises:
            ValueError: the inputs are not ``[B, H_talker]`` of one batch size.
        """
        if talker_hidden.dim() != 2 or talker_hidden.shape != first_code_embed.shape \
                or talker_hidden.shape[1] != self.talker_hidden:
            raise ValueError(f"talker_hidden and first_code_embed must both be [B, {self.talker_hidden}], got "
                             f"{tuple(talker_hidden.shape)} and {tuple(first_code_embed.shape)}")
        cache: list[KV] = []
        x = torch.stack((talker_hidden, first_code_embed), dim=1)  # [B, 2, H_talker]
        codes = []
        position = 0
        for g in range(self.config.num_code_groups - 1):
            hidden = self._run(x, position, cache)
            position += x.shape[1]
            logits = self.lm_head[g](hidden).float()
            if logits_out is not None:
                logits_out.append(logits)
            code = choose(logits, g + 1)
            codes.append(code)
            if g + 1 < self.config.num_code_groups - 1:
                x = self.model.codec_embedding[g](code)[:, None, :]
        return torch.stack(codes, dim=1)

    def embed_frame(self, first_code_embed: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
        """The talker's next input for a frame: its codebook-0 embedding plus ``codec_embedding[g-1]`` of each
        codebook ``g >= 1`` (reference: the sum of ``codec_hiddens``).

        Args:
            first_code_embed: ``[B, H_talker]``; codes: ``[B, G-1]`` (codebooks ``1 .. G-1``).

        Returns:
            ``[B, H_talker]``.
        """
        total = first_code_embed
        for g, table in enumerate(self.model.codec_embedding):
            total = total + table(codes[:, g])
        return total
