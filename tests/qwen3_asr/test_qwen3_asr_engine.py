"""Qwen3-ASR on the engine: prefix caching keyed by the audio (two different audios behind the same placeholders
share no audio block, the same audio hits), audio requests batched with text ones, and bad audio refused before
anything runs."""

from __future__ import annotations

import numpy as np
import pytest
from anna_audio.qwen3_asr.prompt import build_transcription_prompt
from anna_core import LLM, SamplingParams
from anna_core.errors import InvalidRequestError
from anna_core.testing.oracle import hf_greedy_inputs

from tests.qwen3_asr.conftest import clip, hf_request

N = 12
GREEDY = SamplingParams(temperature=0.0, max_tokens=N, ignore_eos=True)
CONTEXT = "Hotwords: Anna, Qwen, transcription."


def llm(path, **cfg):
    cfg = {"block_size": 4, "num_blocks": 256, "max_num_seqs": 4, "prompt_cache_size": 0, **cfg}
    return LLM(path, device="cpu", dtype="fp32", **cfg)


def test_different_audios_behind_the_same_placeholders_share_no_audio_block(tiny_asr, hf_asr, hf_processor):
    engine = llm(tiny_asr)
    prompt = build_transcription_prompt(engine.tokenizer, language=None, context=CONTEXT)
    low, high = clip(300.0, 1.6, 3), clip(2000.0, 1.6, 4)  # equal lengths: equal placeholder counts
    [a] = engine.generate(prompt, GREEDY, media={"audio": [low]})
    [b] = engine.generate(prompt, GREEDY, media={"audio": [high]})
    assert a.prompt_token_ids == b.prompt_token_ids  # identical ids, different audio
    audio_start = a.prompt_token_ids.index(engine.loaded.processor.audio_token_id)
    assert 0 < b.num_cached_tokens <= audio_start // 4 * 4  # the context's blocks only
    assert a.token_ids == hf_greedy_inputs(hf_asr, hf_request(hf_processor, low, context=CONTEXT), N)
    assert b.token_ids == hf_greedy_inputs(hf_asr, hf_request(hf_processor, high, context=CONTEXT), N)
    assert a.token_ids != b.token_ids
    [again] = engine.generate(prompt, GREEDY, media={"audio": [low.copy()]})
    rows = a.prompt_token_ids.count(engine.loaded.processor.audio_token_id)
    assert again.num_cached_tokens > audio_start + rows  # the same audio: its blocks and the text after them hit
    assert again.token_ids == a.token_ids
    encoder = engine.engine.stats()["encoder"]  # the hit covered the audio: no third encode
    assert encoder["media_encoded"] == 2 and encoder["rows_encoded"] == 2 * rows


def test_audio_and_text_requests_batch_together(tiny_asr, hf_asr, hf_processor):
    engine = llm(tiny_asr, max_prefill_tokens=32)
    prompt = build_transcription_prompt(engine.tokenizer, language="English", context=None)
    text_only = engine.tokenizer.encode("<|im_start|>user\nHello, how are you today?<|im_end|>\n")
    tone = clip(700.0, 2.2, 5)
    outs = engine.generate([prompt, text_only, prompt], GREEDY, media=[{"audio": [tone]}, None, {"audio": [tone]}])
    want = hf_greedy_inputs(hf_asr, hf_request(hf_processor, tone, language="English"), N)
    assert outs[0].token_ids == outs[2].token_ids == want
    from anna_core.testing.oracle import hf_greedy as hf_text_greedy

    assert outs[1].token_ids == hf_text_greedy(tiny_asr, text_only, N, model=hf_asr)


def test_bad_audio_is_refused(tiny_asr):
    engine = llm(tiny_asr)
    prompt = build_transcription_prompt(engine.tokenizer, language=None, context=None)
    good = clip(440.0, 1.0, 0)
    cases = [
        ({"audio": [good, good]}, "1 audio placeholders .* for 2 audios"),
        ({"audio": [good.astype(np.int16)]}, "float array"),
        ({"audio": [np.zeros((2, 1600), np.float32)]}, r"shape \(2, 1600\)"),
        ({"audio": [np.zeros(0, np.float32)]}, "non-empty"),
        ({"audio": [np.full(1600, np.nan, np.float32)]}, "NaN"),
        ({"audio": [b"RIFF...."]}, "bytes"),
        ({"image": [good]}, "not image"),
    ]
    for media, needle in cases:
        with pytest.raises(InvalidRequestError, match=needle):
            engine.generate(prompt, GREEDY, media=media)
    with pytest.raises(InvalidRequestError, match="0 audio placeholders"):
        engine.generate(engine.tokenizer.encode("hello"), GREEDY, media={"audio": [good]})
    with pytest.raises(InvalidRequestError, match="no mm_processor_kwargs"):
        engine.generate(prompt, GREEDY, media={"audio": [good]}, mm_processor_kwargs={"fps": 2})
    assert not engine.engine.has_unfinished()
