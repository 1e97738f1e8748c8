"""Splicing encoder outputs into the token embeddings (multimodal prompts, :mod:`anna_core.multimodal`)."""

from __future__ import annotations

import torch

from anna_core.engine.forward_batch import ForwardBatch


def splice_media(embeddings: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
    """The token embeddings with the rows of media placeholders replaced by their encoder outputs.

    Args:
        embeddings: ``[T, hidden]`` the token embeddings of ``batch.input_ids``.
        batch: the step; its ``embeds`` ``[T, hidden]`` and ``embeds_mask`` ``[T]`` bool (None: no medium).

    Returns:
        ``[T, hidden]`` in ``embeddings``' dtype (``embeddings`` itself when the step has no medium).
        Graph-safe: a fixed-shape select, no host sync.
    """
    if batch.embeds is None:
        return embeddings
    return torch.where(batch.embeds_mask[:, None], batch.embeds.to(embeddings.dtype), embeddings)
