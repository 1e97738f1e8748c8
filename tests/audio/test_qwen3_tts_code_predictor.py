"""The code predictor (:mod:`anna_audio.qwen3_tts.code_predictor`) against the reference's golden outputs: from
the talker's hidden state and first code of every generated frame of every case and kind, greedy codebooks
``1 .. G-1`` equal the reference's exactly; the first frame's head logits match; rows batched equal rows alone."""

from __future__ import annotations

import pytest
import torch
from anna_audio.qwen3_tts import load_code_predictor, load_config

from tests.audio.tts_golden import CHECKPOINTS, cases, golden

LOGITS_ATOL = 1e-4
"""Largest head-logit difference allowed against the reference (float32 on the CPU; seen: about 1e-6)."""


def _setup(kind: str):
    from safetensors.torch import load_file

    tensors, _ = golden(kind)
    folder = CHECKPOINTS[kind]
    predictor = load_code_predictor(folder, load_config(folder))
    table = load_file(str(folder / "model.safetensors"))["talker.model.codec_embedding.weight"].float()
    return predictor, table, tensors


@pytest.mark.parametrize("kind", ["base", "custom_voice", "voice_design"])
def test_frames_equal_reference(kind):
    predictor, table, g = _setup(kind)
    checked = 0
    for case, row in cases(g):
        codes, hidden = g[f"{case}/codes/{row}"], g[f"{case}/talker_hidden/{row}"]
        with torch.inference_mode():
            predicted = predictor(hidden, table[codes[:, 0]])
        assert torch.equal(predicted, codes[:, 1:]), f"{kind} {case} row {row}"
        checked += codes.shape[0]
    assert checked >= 20


@pytest.mark.parametrize("kind", ["base", "custom_voice", "voice_design"])
def test_first_frame_logits(kind):
    predictor, _, g = _setup(kind)
    for case in sorted({c for c, _ in cases(g)}):
        prefill = g[f"{case}/predictor_prefill_frame0"]  # [B, 2, H]: talker hidden, first code embedding
        logits: list[torch.Tensor] = []
        with torch.inference_mode():
            predictor(prefill[:, 0], prefill[:, 1], logits_out=logits)
        torch.testing.assert_close(torch.stack(logits, dim=1), g[f"{case}/predictor_logits_frame0"],
                                   atol=LOGITS_ATOL, rtol=0, msg=case)


def test_rows_batched_equal_alone():
    predictor, table, g = _setup("custom_voice")
    codes, hidden = g["batch/codes/0"], g["batch/talker_hidden/0"]
    with torch.inference_mode():
        together = predictor(hidden, table[codes[:, 0]])
        alone = torch.cat([predictor(hidden[i:i + 1], table[codes[i:i + 1, 0]]) for i in range(len(codes))])
    assert torch.equal(together, alone)


def test_bad_inputs():
    predictor, _, _ = _setup("voice_design")
    with pytest.raises(ValueError, match=r"\[B, 32\]"):
        predictor(torch.zeros(2, 32), torch.zeros(3, 32))
    with pytest.raises(ValueError, match=r"\[B, 32\]"):
        predictor(torch.zeros(2, 16), torch.zeros(2, 16))
