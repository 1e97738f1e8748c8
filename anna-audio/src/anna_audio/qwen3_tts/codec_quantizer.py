"""Dequantization of the 12 Hz codec's codes: a split residual vector quantizer (decode direction only).

Math after the reference (QwenLM/Qwen3-TTS ``tokenizer_12hz/modeling_qwen3_tts_tokenizer_v2.py``:
``EuclideanCodebook.decode``, ``ResidualVectorQuantizer.decode``, ``SplitResidualVectorQuantizer.decode``): codebook
``q``'s vectors are ``embedding_sum / max(cluster_usage, 1e-5)``; the first (semantic) codebook and the remaining
(acoustic) ones are summed separately, each group projected by its own pointwise convolution, and the two added.
Parameter names follow the checkpoint's ``decoder.quantizer.rvq_first.*`` / ``rvq_rest.*``; the groups'
``input_proj`` weights serve encoding only and are not loaded here.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Codebook(nn.Module):
    """Parameters: cluster_usage ``[K]``, embedding_sum ``[K, d]``."""

    def __init__(self, size: int, dim: int, epsilon: float = 1e-5) -> None:
        super().__init__()
        self.cluster_usage = nn.Parameter(torch.ones(size))
        self.embedding_sum = nn.Parameter(torch.zeros(size, dim))
        self.epsilon = epsilon

    def vectors(self) -> torch.Tensor:
        """``[K, d]``: each entry's mean vector."""
        return self.embedding_sum / self.cluster_usage.clamp(min=self.epsilon)[:, None]


class _CodebookSlot(nn.Module):
    """Holds one :class:`Codebook` under the checkpoint's name (``layers.<i>._codebook``)."""

    def __init__(self, size: int, dim: int) -> None:
        super().__init__()
        self._codebook = Codebook(size, dim)


class _CodebookList(nn.Module):
    def __init__(self, count: int, size: int, dim: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList([_CodebookSlot(size, dim) for _ in range(count)])


class CodebookGroup(nn.Module):
    """Sum of ``count`` codebooks' vectors, projected ``[d] -> [out]`` by a bias-free pointwise convolution.

    Parameters:
        vq.layers.<i>._codebook.{cluster_usage, embedding_sum}; output_proj.weight ``[out, d, 1]``.
    """

    def __init__(self, count: int, size: int, dim: int, out_dim: int) -> None:
        super().__init__()
        self.vq = _CodebookList(count, size, dim)
        self.output_proj = nn.Conv1d(dim, out_dim, 1, bias=False)

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        """codes: ``[B, count, T]`` int64 -> ``[B, out, T]``."""
        total = None
        for i, slot in enumerate(self.vq.layers):
            part = F.embedding(codes[:, i], slot._codebook.vectors())  # [B, T, d]
            total = part if total is None else total + part
        return self.output_proj(total.transpose(1, 2))


class SplitQuantizer(nn.Module):
    """Codes ``[B, Q, T]`` -> ``[B, codebook_dim, T]``: codebook 0 through ``rvq_first``, codebooks ``1 .. Q-1``
    through ``rvq_rest``, added; each codebook holds ``codebook_dim // 2``-wide vectors."""

    def __init__(self, num_quantizers: int, codebook_size: int, codebook_dim: int) -> None:
        super().__init__()
        self.num_quantizers = num_quantizers
        self.codebook_size = codebook_size
        self.rvq_first = CodebookGroup(1, codebook_size, codebook_dim // 2, codebook_dim)
        self.rvq_rest = CodebookGroup(num_quantizers - 1, codebook_size, codebook_dim // 2, codebook_dim)

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        return self.rvq_first(codes[:, :1]) + self.rvq_rest(codes[:, 1:])
