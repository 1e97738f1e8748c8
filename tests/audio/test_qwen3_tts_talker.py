"""The plain talker (:mod:`anna_audio.qwen3_tts.prompt`, :mod:`~anna_audio.qwen3_tts.talker`,
:mod:`~anna_audio.qwen3_tts.generate`) against the reference's golden outputs, for every case of all three kinds:
prompt embeddings (named speakers and dialects, instructions, x-vector and in-context cloning, text in the prompt or
streamed), the first talker logits, greedy codes exactly, and waveforms end to end through the codec decoder."""

from __future__ import annotations

import pytest
import torch
from anna_audio.qwen3_tts import load_codec_decoder
from anna_audio.qwen3_tts.generate import generate_greedy
from anna_audio.qwen3_tts.prompt import SpeechRequest, build_prompt, language_id

from tests.audio.tts_golden import CHECKPOINTS, KINDS, WAVE_ATOL, golden, speech_requests, talker_parts

LOGITS_ATOL = 1e-4


@pytest.fixture(scope="module", params=KINDS)
def kind(request):
    name = request.param
    tensors, facts = golden(name)
    return (name, *talker_parts(name), tensors, facts["cases"])


def test_prompts_match_reference(kind):
    name, config, talker, predictor, g, cases = kind
    for case, row, request in speech_requests(cases, g):
        with torch.inference_mode():
            prompt = build_prompt(config, talker, predictor, request)
        mask = g[f"{case}/talker_attention_mask"][row].bool()  # batches are left-padded
        reference = g[f"{case}/talker_prefill_embeds"][row][mask]
        torch.testing.assert_close(prompt.prefill, reference, atol=1e-6, rtol=0, msg=f"{name} {case} {row}")


def test_codes_and_logits_match_reference(kind):
    name, config, talker, predictor, g, cases = kind
    for case, row, request in speech_requests(cases, g):
        with torch.inference_mode():
            prompt = build_prompt(config, talker, predictor, request)
        out = generate_greedy(config, talker, predictor, prompt, max_new_tokens=24, repetition_penalty=1.05)
        assert torch.equal(out.codes, g[f"{case}/codes/{row}"]), f"{name} {case} row {row}"
        torch.testing.assert_close(out.hidden, g[f"{case}/talker_hidden/{row}"], atol=1e-4, rtol=0)
        steps = min(out.logits.shape[0], g[f"{case}/talker_logits"].shape[1])
        torch.testing.assert_close(out.logits[:steps], g[f"{case}/talker_logits"][row, :steps], atol=LOGITS_ATOL,
                                   rtol=0)


def test_waveforms_end_to_end(kind):
    """Text ids -> codes -> waveform equals the reference's batch output (Base in-context cloning decodes the
    reference codes in front and cuts their share off, as the reference does)."""
    name, config, talker, predictor, g, cases = kind
    decoder = load_codec_decoder(CHECKPOINTS[name], config)
    for case, row, request in speech_requests(cases, g):
        if case != "batch":
            continue
        with torch.inference_mode():
            codes = generate_greedy(config, talker, predictor, build_prompt(config, talker, predictor, request),
                                    max_new_tokens=24).codes
            if request.ref_codes is not None:
                full = decoder.decode([torch.cat([request.ref_codes, codes])])[0]
                wav = full[int(request.ref_codes.shape[0] / (request.ref_codes.shape[0] + codes.shape[0])
                               * full.shape[0]):]
            else:
                wav = decoder.decode([codes])[0]
        torch.testing.assert_close(wav, g[f"batch/wav/{row}"], atol=WAVE_ATOL, rtol=0, msg=f"{name} row {row}")


def test_language_iso_codes_name_the_same_language():
    """OpenAI clients send ISO 639-1 codes (as transcription does): ``en`` is English, in any case."""
    config, talker, predictor = talker_parts("custom_voice")
    assert "english" in config.talker.languages
    assert language_id(config, "en", None) == language_id(config, " EN ", None) == config.talker.languages["english"]
    assert language_id(config, "English", None) == config.talker.languages["english"]
    assert language_id(config, "auto", None) is None


def test_request_errors():
    tensors, facts = golden("custom_voice")
    config, talker, predictor = talker_parts("custom_voice")
    ids = torch.tensor(facts["cases"]["single0"]["input_ids"][0])
    with pytest.raises(ValueError, match="speaker 'nobody'"):
        build_prompt(config, talker, predictor, SpeechRequest(assistant_ids=ids, speaker="nobody"))
    with pytest.raises(ValueError, match="language 'klingon'"):
        build_prompt(config, talker, predictor, SpeechRequest(assistant_ids=ids, language="klingon"))
    with pytest.raises(ValueError, match="language 'xx'"):
        build_prompt(config, talker, predictor, SpeechRequest(assistant_ids=ids, language="xx"))
    with pytest.raises(ValueError, match="takes no reference audio"):
        build_prompt(config, talker, predictor, SpeechRequest(assistant_ids=ids, speaker_embedding=torch.zeros(32)))
    with pytest.raises(ValueError, match="max_new_tokens"):
        prompt = build_prompt(config, talker, predictor, SpeechRequest(assistant_ids=ids, speaker="serena"))
        generate_greedy(config, talker, predictor, prompt, max_new_tokens=0)


def test_to_device_keeps_values_and_ids_become_int64():
    from anna_audio.qwen3_tts.prompt import to_device

    got = to_device([3, 1, 2], torch.device("cpu"))
    assert got.dtype == torch.int64 and got.tolist() == [3, 1, 2]
    t = torch.randn(4)
    assert torch.equal(to_device(t, torch.device("cpu")), t)
