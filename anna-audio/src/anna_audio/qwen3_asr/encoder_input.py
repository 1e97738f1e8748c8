"""The audio encoder's input, one call at a time: clips' log-mel features padded into one batch with their frame
mask, and the window-aligned segments a clip too long for one call is cut into.

transformers' ``Qwen3ASREncoder`` runs its three convolutions over every ``2 * n_window``-frame chunk of a call at
once (their activations grow with the chunks: gigabytes for a 20-minute clip), then attends within windows of
``n_window_infer`` frames counted from each clip's start. A chunk's rows depend on that chunk alone and a window's on
that window alone, so a clip cut at multiples of ``n_window_infer`` frames into segments encoded as clips of their
own gives the same rows, in order, as the whole clip: :func:`segment_frames` sizes the segments so that each call
stays within the convolution budget (``conv_chunksize`` chunks), :func:`segments` cuts them.
"""

from __future__ import annotations

import torch

from anna_audio.features import AudioFeatures

Piece = tuple[torch.Tensor, int]
"""``(features [n_mels, F], valid frames)``: one clip (or segment of one) as the encoder takes it."""


def segment_frames(budget_frames: int, window_frames: int, chunk_frames: int) -> int | None:
    """Frames of the segments a too-long clip is cut into: the most whole attention windows that fit the budget (at
    least one window), or None when windows do not fall on chunk boundaries (the clip cannot be cut exactly).

    Args:
        budget_frames: mel frames one encoder call may take (``conv_chunksize * 2 * n_window``).
        window_frames: the encoder's attention window (``n_window_infer``).
        chunk_frames: a convolution chunk (``2 * n_window``).
    """
    if window_frames <= 0 or chunk_frames <= 0 or window_frames % chunk_frames:
        return None
    return max(1, budget_frames // window_frames) * window_frames


def segments(features: AudioFeatures, frames: int) -> list[Piece]:
    """``features`` cut every ``frames`` frames (a multiple of the chunk), the segments past the clip's last frame
    left out; each with its own count of valid frames."""
    return [(features.features[:, start:start + frames], min(frames, features.num_frames - start))
            for start in range(0, features.num_frames, frames)]


def batch(pieces: list[Piece], num_mel_bins: int, device: torch.device, dtype: torch.dtype
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_features [B, n_mels, F] in dtype, input_features_mask [B, F] long)`` of ``pieces``: each piece's
    frames from the left, zeros and mask 0 past its valid frames, ``F`` the widest piece's."""
    width = max(f.shape[1] for f, _ in pieces)
    x = torch.zeros(len(pieces), num_mel_bins, width, dtype=dtype, device=device)
    mask = torch.zeros(len(pieces), width, dtype=torch.long, device=device)
    for i, (f, valid) in enumerate(pieces):
        x[i, :, :f.shape[1]] = f.to(device=device, dtype=dtype)
        mask[i, :valid] = 1
    return x, mask
