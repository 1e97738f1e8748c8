"""The encoder's input per call (:mod:`anna_audio.qwen3_asr.encoder_input`): segment sizes, the cut of a clip's
features and the padded batch with its mask."""

from __future__ import annotations

import torch
from anna_audio.features import AudioFeatures
from anna_audio.qwen3_asr.encoder_input import batch, segment_frames, segments


def test_segment_frames():
    assert segment_frames(500 * 100, 800, 100) == 49600  # the released budget: 62 windows of 800 frames
    assert segment_frames(300, 800, 100) == 800  # a window never splits, even past the budget
    assert segment_frames(300, 200, 100) == 200
    assert segment_frames(300, 150, 100) is None  # windows off the chunk grid: no exact cut
    assert segment_frames(300, 0, 100) is None


def test_segments_and_batch():
    feats = torch.arange(4 * 600, dtype=torch.float32).reshape(4, 600)
    clip = AudioFeatures(features=feats, num_frames=537, num_rows=70)
    pieces = segments(clip, 200)
    assert [(f.shape[1], valid) for f, valid in pieces] == [(200, 200), (200, 200), (200, 137)]
    assert torch.equal(torch.cat([f for f, _ in pieces], dim=1), feats)
    x, mask = batch([pieces[2], (feats[:, :100], 60)], 4, torch.device("cpu"), torch.bfloat16)
    assert x.shape == (2, 4, 200) and x.dtype == torch.bfloat16 and mask.dtype == torch.long
    assert torch.equal(x[0], pieces[2][0].to(torch.bfloat16)) and not x[1, :, 100:].any()
    assert mask.sum(dim=1).tolist() == [137, 60] and mask[0, :137].all() and mask[1, :60].all()
