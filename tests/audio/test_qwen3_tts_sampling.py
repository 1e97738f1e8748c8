"""Qwen3-TTS sampling (:mod:`anna_audio.qwen3_tts.sampling`): defaults from a checkpoint's generation_config.json,
the code choice (greedy, temperature, top-k, top-p, seeded draws), and sampled generation that can only pick the
top code equal to the reference's greedy codes."""

from __future__ import annotations

import json

import pytest
import torch
from anna_audio.qwen3_tts import load_code_predictor, load_config
from anna_audio.qwen3_tts.generate import generate
from anna_audio.qwen3_tts.prompt import SpeechRequest, build_prompt
from anna_audio.qwen3_tts.sampling import DEFAULTS, CodeSampling, SpeechSampling, choose, load_sampling
from anna_audio.qwen3_tts.weights import load_talker
from anna_core.errors import ModelLoadError

from tests.audio.tts_golden import CHECKPOINTS, golden


def test_defaults_from_the_checkpoint(tmp_path):
    golden("custom_voice")
    sampling = load_sampling(CHECKPOINTS["custom_voice"])
    assert sampling.talker == CodeSampling(do_sample=True, temperature=0.9, top_k=50, top_p=1.0)
    assert sampling.predictor == sampling.talker
    assert (sampling.repetition_penalty, sampling.max_new_tokens) == (1.05, 8192)
    assert load_sampling(tmp_path).max_new_tokens == DEFAULTS["max_new_tokens"]  # no file: reference defaults
    (tmp_path / "generation_config.json").write_text(json.dumps({"top_p": 0, "subtalker_top_k": 5}))
    with pytest.raises(ModelLoadError, match="top_p must be in"):
        load_sampling(tmp_path)


def test_choice():
    logits = torch.tensor([[0.0, 3.0, 2.9, -1.0, float("-inf")], [1.0, 0.5, 0.2, 0.1, 0.0]])
    greedy = CodeSampling(do_sample=False, temperature=1.0, top_k=0, top_p=1.0)
    assert choose(logits, greedy).tolist() == [1, 0]
    top1 = CodeSampling(do_sample=True, temperature=0.7, top_k=1, top_p=1.0)
    tiny_p = CodeSampling(do_sample=True, temperature=1.0, top_k=0, top_p=0.01)
    for sampling in (top1, tiny_p):
        assert choose(logits, sampling, torch.Generator().manual_seed(0)).tolist() == [1, 0]
    top2 = CodeSampling(do_sample=True, temperature=2.0, top_k=2, top_p=1.0)
    draws = torch.stack([choose(logits, top2, torch.Generator().manual_seed(s)) for s in range(200)])
    assert set(draws[:, 0].tolist()) == {1, 2} and set(draws[:, 1].tolist()) == {0, 1}
    again = torch.stack([choose(logits, top2, torch.Generator().manual_seed(s)) for s in range(200)])
    assert torch.equal(draws, again)
    wide = CodeSampling(do_sample=True, temperature=1.0, top_k=0, top_p=1.0)
    drawn = {int(choose(logits, wide, torch.Generator().manual_seed(s))[0]) for s in range(3000)}
    assert 4 not in drawn and {0, 1, 2, 3} <= drawn
    with pytest.raises(ValueError, match="temperature"):
        CodeSampling(do_sample=True, temperature=0.0, top_k=0, top_p=1.0)


def test_sampling_only_the_top_code_is_greedy():
    g, facts = golden("custom_voice")
    folder = CHECKPOINTS["custom_voice"]
    config = load_config(folder)
    talker, predictor = load_talker(folder, config), load_code_predictor(folder, config)
    case = facts["cases"]["single0"]
    request = SpeechRequest(assistant_ids=torch.tensor(case["input_ids"][0]), language=case["language"][0],
                            speaker=case["speaker"][0], non_streaming_text=True)
    top1 = CodeSampling(do_sample=True, temperature=0.9, top_k=1, top_p=1.0)
    with torch.inference_mode():
        prompt = build_prompt(config, talker, predictor, request)
    out = generate(config, talker, predictor, prompt, SpeechSampling(talker=top1, predictor=top1,
                                                                      repetition_penalty=1.05, max_new_tokens=24),
                   generator=torch.Generator().manual_seed(1))
    assert torch.equal(out.codes, g["single0/codes/0"])


def test_gumbel_choice_draws_the_filtered_distribution():
    """:func:`choose_gumbel` (the engine talker's code predictor): greedy is the argmax; sampled codes keep to top-k /
    top-p and come with their probabilities (20000 draws: each within 0.015 of the softmax)."""
    from anna_audio.qwen3_tts.sampling import choose_gumbel

    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0]])
    assert choose_gumbel(logits, CodeSampling(False, 1.0, 0, 1.0)).tolist() == [0]
    torch.manual_seed(0)
    draws = choose_gumbel(logits.expand(20000, -1), CodeSampling(True, 0.8, 3, 1.0))
    freq = torch.bincount(draws, minlength=5).float() / draws.numel()
    expected = torch.softmax(logits[0, :3] / 0.8, dim=-1)
    assert freq[3:].sum() == 0
    torch.testing.assert_close(freq[:3], expected, atol=0.015, rtol=0)
    top_p = choose_gumbel(logits.expand(2000, -1), CodeSampling(True, 1.0, 0, 0.5))  # p(code 0) = 0.55 >= 0.5
    assert set(top_p.tolist()) == {0}
