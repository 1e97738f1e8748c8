"""HF parity of Qwen3-ASR on a tiny random checkpoint (float32, CPU): the prompt and features against
``Qwen3ASRProcessor.apply_transcription_request``, logits against ``Qwen3ASRForConditionalGeneration``'s forward
pass (whole and chunked), greedy transcript tokens through the engine against HF ``generate`` (one audio, several
batched, chunked prefill), the original release layout against the converted one, and the encoder batch bound."""

from __future__ import annotations

import pytest
import torch
from anna_audio.features import BATCH_TOLERANCE
from anna_audio.qwen3_asr.prompt import build_transcription_prompt
from anna_core import LLM, SamplingParams
from anna_core.testing.oracle import hf_greedy_inputs

from tests.qwen3_asr.conftest import anna_logits, clip, hf_logits, hf_request, load_anna, rel_err

N = 24
GREEDY = SamplingParams(temperature=0.0, max_tokens=N, ignore_eos=True)
CLIPS = {
    "short": lambda: clip(300.0, 0.3, 2),  # under 0.5 s: zero-padded to it, as Qwen3-ASR does
    "tone": lambda: clip(440.0, 2.7, 0),
    "long": lambda: clip(1200.0, 4.35, 1),  # past the tiny encoder's 2-second attention window
}
REQUESTS = {"plain": (None, None), "context": (None, "Hotwords: Anna, Qwen."), "forced": ("English", "names")}


@pytest.fixture(scope="module")
def anna(tiny_asr):
    return load_anna(tiny_asr)


def prepare(loaded, audio, language=None, context=None):
    ids = build_transcription_prompt(loaded.tokenizer, language=language, context=context)
    return loaded.processor.process(ids, {"audio": [audio]})


@pytest.mark.parametrize("request_kind", REQUESTS)
@pytest.mark.parametrize("name", ["short", "long"])
def test_prompt_and_features_equal_hf_processor(anna, hf_processor, name, request_kind):
    language, context = REQUESTS[request_kind]
    audio = CLIPS[name]()
    ids, mm = prepare(anna, audio, language, context)
    ref = hf_request(hf_processor, audio, language=language, context=context)
    assert ids == ref["input_ids"][0].tolist()
    [item] = mm.items
    assert item.modality == "audio" and ids[item.offset:item.end] == [anna.processor.audio_token_id] * item.length
    assert item.data["num_frames"] == int(ref["input_features_mask"][0].sum())
    [feats] = anna.model.features.batch([item.data["samples"]])  # what the model computes on its device
    assert feats.num_frames == item.data["num_frames"] and feats.num_rows == item.length
    assert feats.features.shape == ref["input_features"][0].shape
    assert (feats.features - ref["input_features"][0]).abs().max() <= BATCH_TOLERANCE


@pytest.mark.parametrize("name", list(CLIPS))
def test_logits_match_hf_whole_and_chunked(anna, hf_asr, hf_processor, name):
    audio = CLIPS[name]()
    ids, mm = prepare(anna, audio, context="Hotwords: Anna.")
    inputs = hf_request(hf_processor, audio, context="Hotwords: Anna.")
    generated = hf_greedy_inputs(hf_asr, inputs, 8)
    ref = hf_logits(hf_asr, inputs, generated)
    whole = anna_logits(anna.model, ids + generated, mm)
    assert whole.shape == ref.shape
    assert rel_err(whole, ref) < 1e-4
    chunked = anna_logits(anna.model, ids + generated, mm, chunk=7)  # chunks cut through the audio rows
    assert rel_err(chunked, ref) < 1e-4


def test_encoder_rows_equal_hf_audio_features(anna, hf_asr, hf_processor):
    audio = CLIPS["long"]()
    _, mm = prepare(anna, audio)
    inputs = hf_request(hf_processor, audio)
    with torch.no_grad():
        ref = hf_asr.get_audio_features(inputs["input_features"], inputs["input_features_mask"]).pooler_output
    [mine] = anna.model.encode(list(mm.items))
    assert mine.shape == ref.shape and rel_err(mine, ref) < 1e-5


@pytest.fixture(scope="module")
def hf_tokens(hf_asr, hf_processor):
    """HF's greedy tokens for a clip name and a request kind (each alone)."""
    cache = {}

    def get(name, kind):
        if (name, kind) not in cache:
            language, context = REQUESTS[kind]
            cache[name, kind] = hf_greedy_inputs(hf_asr, hf_request(hf_processor, CLIPS[name](), language=language,
                                                             context=context), N)
        return cache[name, kind]

    return get


def engine(path, **cfg):
    cfg = {"block_size": 4, "num_blocks": 512, "max_num_seqs": 4, "prompt_cache_size": 0, **cfg}
    return LLM(path, device="cpu", dtype="fp32", **cfg)


def test_greedy_transcripts_equal_hf_single_and_batched(tiny_asr, hf_tokens):
    llm = engine(tiny_asr)
    cases = [("tone", "plain"), ("long", "context"), ("short", "forced"), ("tone", "forced")]
    prompts = [build_transcription_prompt(llm.tokenizer, language=REQUESTS[k][0], context=REQUESTS[k][1])
               for _, k in cases]
    media = [{"audio": [CLIPS[name]()]} for name, _ in cases]
    batched = llm.generate(prompts, GREEDY, media=media)  # four audios encoded and decoded in the same steps
    want = [hf_tokens(name, kind) for name, kind in cases]
    assert [o.token_ids for o in batched] == want
    assert len({tuple(w) for w in want}) >= 3  # the audio and the prompt change the transcript
    [alone] = llm.generate(prompts[1], GREEDY, media=media[1])
    assert alone.token_ids == want[1]


@pytest.mark.parametrize("chunk", [5, 16])
def test_a_chunked_prefill_gives_hf_tokens(tiny_asr, hf_tokens, chunk):
    llm = engine(tiny_asr, enable_prefix_caching=False, prefill_chunk_size=chunk)
    prompt = build_transcription_prompt(llm.tokenizer, language=None, context=REQUESTS["context"][1])
    [out] = llm.generate(prompt, GREEDY, media={"audio": [CLIPS["long"]()]})
    assert out.token_ids == hf_tokens("long", "context")
    assert llm.engine.runner.encoder.outputs == {}  # released once the prefill read it


def test_the_original_layout_gives_identical_logits(anna, tiny_asr_original):
    original = load_anna(tiny_asr_original)
    assert original.model.asr_config.layout == "original" and anna.model.asr_config.layout == "hf"
    audio = CLIPS["long"]()
    ids, mm = prepare(anna, audio, context="x")
    ids2, mm2 = prepare(original, audio, context="x")
    assert ids == ids2
    tail = [5, 17, 42]
    assert torch.equal(anna_logits(original.model, ids2 + tail, mm2), anna_logits(anna.model, ids + tail, mm))


def test_the_encoder_runs_at_most_the_batch_bound(tiny_asr):
    loaded = load_anna(tiny_asr, asr_max_inference_batch_size=2)
    model = loaded.model
    assert model.max_encoder_batch == 2
    sizes = []
    hook = model.audio_tower.register_forward_pre_hook(
        lambda module, args, kwargs: sizes.append(kwargs["input_features"].shape[0]), with_kwargs=True)
    clips = [clip(200.0 + 150 * i, 0.6 + 0.4 * i, i) for i in range(5)]
    items = [loaded.processor.process([loaded.processor.audio_token_id], {"audio": [c]})[1].items[0] for c in clips]
    try:
        together = model.encode(items)
        assert sizes == [2, 2, 1]
        alone = [model.encode([item])[0] for item in items]
    finally:
        hook.remove()
    for a, b, item in zip(together, alone, items):
        assert a.shape == (item.length, model.hidden_size)
        assert rel_err(a, b) < 1e-5  # a clip's rows do not depend on the clips batched with it


def test_an_encoder_call_takes_at_most_conv_chunksize_chunks(tiny_asr, tmp_path):
    import json
    import shutil

    folder = tmp_path / "chunks"
    shutil.copytree(tiny_asr, folder)
    config = json.loads((folder / "config.json").read_text())
    config["audio_config"]["conv_chunksize"] = 3  # 300 mel frames a call
    (folder / "config.json").write_text(json.dumps(config))
    loaded = load_anna(folder, asr_max_inference_batch_size=2)
    clips = [clip(200.0 + 150 * i, s, i) for i, s in enumerate([0.6, 1.0, 1.4, 1.8, 3.2])]  # 1, 1, 2, 2, 4 chunks
    items = [loaded.processor.process([loaded.processor.audio_token_id], {"audio": [c]})[1].items[0] for c in clips]
    groups = loaded.model.encoder_groups(items)
    assert [[items.index(m) for m in g] for g in groups] == [[0, 1], [2], [3], [4]]  # the 4-chunk clip alone


def test_a_bound_of_one_audio_per_encoder_call_changes_no_transcript(tiny_asr, hf_tokens):
    llm = engine(tiny_asr, family_options={"asr_max_inference_batch_size": 1})
    assert llm.loaded.model.max_encoder_batch == 1
    cases = [("tone", "plain"), ("long", "context"), ("short", "plain")]
    prompts = [build_transcription_prompt(llm.tokenizer, language=REQUESTS[k][0], context=REQUESTS[k][1])
               for _, k in cases]
    outs = llm.generate(prompts, GREEDY, media=[{"audio": [CLIPS[name]()]} for name, _ in cases])
    assert [o.token_ids for o in outs] == [hf_tokens(name, kind) for name, kind in cases]


def test_bf16_logits_are_as_near_fp32_as_hf_bf16(tiny_asr, hf_asr, hf_processor):
    """The serving dtype on GPUs: encoder, projector and decoder in bfloat16. Anna's bf16 logits are no further from
    HF's float32 ones than HF's own bf16 logits are (each side rounds on its own)."""
    from anna_core.testing.oracle import hf_model

    loaded = load_anna(tiny_asr, dtype=torch.bfloat16)
    hf_bf16 = hf_model(tiny_asr, dtype=torch.bfloat16)
    audio = CLIPS["long"]()
    ids, mm = prepare(loaded, audio, context="Hotwords: Anna.")
    inputs = hf_request(hf_processor, audio, context="Hotwords: Anna.")
    ref = hf_logits(hf_asr, inputs, [])
    theirs = hf_logits(hf_bf16, {**inputs, "input_features": inputs["input_features"].to(torch.bfloat16)}, [])
    [rows] = loaded.model.encode(list(mm.items))
    assert rows.dtype == torch.bfloat16
    mine = anna_logits(loaded.model, ids, mm, dtype=torch.bfloat16)
    assert rel_err(mine, ref) <= 1.5 * rel_err(theirs, ref)


def test_a_clip_over_the_convolution_budget_is_encoded_in_segments_with_the_same_rows(anna, hf_asr, hf_processor,
                                                                                     tiny_asr, tmp_path):
    """``conv_chunksize`` 3 (300 frames a call) and 200-frame attention windows: a 9.37 s clip (937 frames, 10
    chunks) runs as five 200-frame calls, never more than the budget, and its rows equal the whole clip's in one call
    and HF's encoder on the whole clip."""
    import json
    import shutil

    from anna_audio.qwen3_asr.encoder_input import segment_frames

    folder = tmp_path / "segments"
    shutil.copytree(tiny_asr, folder)
    config = json.loads((folder / "config.json").read_text())
    config["audio_config"]["conv_chunksize"] = 3
    (folder / "config.json").write_text(json.dumps(config))
    segmented = load_anna(folder)
    assert segmented.model.audio_tower.n_window_infer == 200 and segment_frames(300, 200, 100) == 200
    audio = clip(700.0, 9.37, 5)
    _, mm = prepare(segmented, audio)
    widths = []
    hook = segmented.model.audio_tower.register_forward_pre_hook(
        lambda module, args, kwargs: widths.append(tuple(kwargs["input_features"].shape)), with_kwargs=True)
    try:
        [rows] = segmented.model.encode(list(mm.items))
    finally:
        hook.remove()
    assert widths == [(1, 128, 200)] * 5
    [whole] = anna.model.encode(list(mm.items))  # the default budget: one call
    assert rows.shape == whole.shape == (mm.items[0].length, anna.model.hidden_size)
    assert rel_err(rows, whole) < 1e-6
    inputs = hf_request(hf_processor, audio)
    with torch.no_grad():
        ref = hf_asr.get_audio_features(inputs["input_features"], inputs["input_features_mask"]).pooler_output
    assert rel_err(rows, ref) < 1e-5
