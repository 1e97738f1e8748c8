"""HF parity of the Qwen3.5 vision-language model on a tiny random checkpoint (float32, CPU): the vision tower
against ``get_image_features``, the processor's ids and M-RoPE positions against HF's inputs and
``get_rope_index``, logits against HF's forward pass, and 32 greedy tokens through ``anna_core.LLM`` against HF
``generate`` for prompts with one and with two images; the dense and the mixture-of-experts layouts."""

from __future__ import annotations

import pytest
import torch
from anna_core import LLM, SamplingParams
from anna_core.testing.oracle import hf_greedy_inputs
from anna_core.testing.runner import build_batch

from tests.qwen35.conftest import load_anna
from tests.qwen35_vl.conftest import PROMPT_ONE, PROMPT_TWO, hf_inputs, hf_logits_vl, random_image

N = 32
GREEDY = SamplingParams(temperature=0.0, max_tokens=N, ignore_eos=True)
CASES = {
    "one image": (PROMPT_ONE, [(1, 56, 56)]),
    "two images": (PROMPT_TWO, [(2, 56, 56), (3, 28, 84)]),
}


@pytest.fixture(scope="module", params=["dense", "moe"])
def ckpt(request):
    """The tiny checkpoint of each layout (dense: the session's ``tiny_vl``)."""
    if request.param == "dense":
        return request.getfixturevalue("tiny_vl")
    return request.getfixturevalue("tiny_vl_moe")


@pytest.fixture(scope="module")
def anna(ckpt):
    return load_anna(ckpt)


@pytest.fixture(scope="module")
def hf(ckpt):
    from anna_core.testing.oracle import hf_model

    return hf_model(ckpt)


def prepare(loaded, text, images):
    """Anna's prompt ids and multimodal inputs for ``text`` and ``images``."""
    return loaded.processor.process(loaded.tokenizer.encode(text), {"image": images})


@torch.inference_mode()
def anna_logits(model, ids, mm, chunk=None, block_size=16):
    """Anna's float32 logits ``[len(ids), vocab]`` over one sequence, prefilled in chunks of ``chunk`` tokens (all
    at once by default) with the media spliced in and the M-RoPE positions of ``mm``."""
    from anna_core.engine.cache_allocator import zeroed_caches as allocate_caches

    num_prompt = len(mm.positions[0])
    blocks = -(-len(ids) // block_size)
    caches = allocate_caches(model.cache_spec, num_blocks=blocks, block_size=block_size, num_slots=1,
                             device=torch.device("cpu"), dtype=torch.float32)
    rows = {m.offset: (m, out) for m, out in zip(mm.items, model.encode(list(mm.items)))}
    embeds = torch.zeros(len(ids), model.hidden_size)
    mask = torch.zeros(len(ids), dtype=torch.bool)
    for m, out in rows.values():
        embeds[m.offset:m.end], mask[m.offset:m.end] = out, True
    step, out = chunk or len(ids), []
    for start in range(0, len(ids), step):
        end = min(start + step, len(ids))
        batch = build_batch([(ids[start:end], start)], block_size=block_size, blocks_per_seq=blocks,
                            device=torch.device("cpu"), spec=model.cache_spec)
        batch.positions = torch.tensor(mm.position_rows(start, end, num_prompt, 3))
        batch.embeds, batch.embeds_mask = embeds[start:end], mask[start:end]
        out.append(model.compute_logits(model(batch, caches)))
    return torch.cat(out)


def test_the_loaded_model_declares_images_and_three_position_rows(anna):
    caps = anna.model.capabilities
    assert caps.modalities == ("image", "video") and caps.position_rows == 3
    assert anna.processor is not None and anna.model.visual is not None


@pytest.mark.parametrize("case", CASES)
def test_the_tower_matches_hf_get_image_features(anna, hf, ckpt, case):
    text, shapes = CASES[case]
    images = [random_image(*s) for s in shapes]
    _, mm = prepare(anna, text, images)
    inputs = hf_inputs(ckpt, text, images)
    with torch.no_grad():
        ref = hf.model.get_image_features(inputs["pixel_values"], inputs["image_grid_thw"]).pooler_output
    got = anna.model.encode(list(mm.items))
    assert [g.shape for g in got] == [r.shape for r in ref]
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r, rtol=0, atol=1e-5 * r.abs().max().item())


def test_the_tower_matches_hf_get_video_features_on_frames(anna, hf):
    """A medium of several temporal patches (a video's frames): attention stays inside each, the position table
    repeats over them."""
    from anna_core.multimodal import MediaItem

    grid = (3, 4, 6)
    pixels = torch.randn(72, anna.model.visual.config.patch_dim, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        [ref] = hf.model.get_video_features(pixels, torch.tensor([grid])).pooler_output
    [got] = anna.model.encode([MediaItem("video", 0, 18, b"v", {"pixel_values": pixels, "grid_thw": grid})])
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-5 * ref.abs().max().item())
    frame = anna.model.encode([MediaItem("video", 0, 6, b"f", {"pixel_values": pixels[24:48], "grid_thw": (1, 4, 6)})])
    torch.testing.assert_close(frame[0], got[6:12], rtol=0, atol=1e-5)  # the middle frame alone: the same rows


@pytest.mark.parametrize("case", CASES)
def test_prompt_ids_and_positions_match_hf(anna, hf, ckpt, case):
    text, shapes = CASES[case]
    images = [random_image(*s) for s in shapes]
    ids, mm = prepare(anna, text, images)
    inputs = hf_inputs(ckpt, text, images)
    assert ids == inputs["input_ids"][0].tolist()
    pos, delta = hf.model.get_rope_index(inputs["input_ids"], inputs["mm_token_type_ids"],
                                            inputs["image_grid_thw"])
    assert [list(r) for r in mm.positions] == pos[:, 0].tolist()
    assert mm.position_delta == int(delta[0, 0]) and mm.position_delta < 0  # images take fewer positions
    image_id = anna.processor.image_token_id
    assert [(m.offset, m.length) for m in mm.items] == _runs(ids, image_id)
    assert all(m.data["grid_thw"] == tuple(g) for m, g in zip(mm.items, inputs["image_grid_thw"].tolist()))


def _runs(ids, token):
    runs, i = [], 0
    while i < len(ids):
        if ids[i] == token:
            j = i
            while j < len(ids) and ids[j] == token:
                j += 1
            runs.append((i, j - i))
            i = j
        else:
            i += 1
    return runs


@pytest.fixture(scope="module")
def hf_runs(hf, ckpt):
    """Per case: (HF inputs, HF's 32 greedy tokens)."""
    out = {}
    for case, (text, shapes) in CASES.items():
        inputs = hf_inputs(ckpt, text, [random_image(*s) for s in shapes])
        out[case] = (inputs, hf_greedy_inputs(hf, inputs, N))
    return out


@pytest.mark.parametrize("case", CASES)
def test_logits_match_hf_over_prompt_and_generated_tokens(anna, hf, hf_runs, case):
    text, shapes = CASES[case]
    ids, mm = prepare(anna, text, [random_image(*s) for s in shapes])
    inputs, generated = hf_runs[case]
    ref = hf_logits_vl(hf, inputs, generated)
    got = anna_logits(anna.model, ids + generated, mm)
    assert got.shape == ref.shape
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-4)
    assert (got[-N:].argmax(-1) != got[-N - 1:-1].argmax(-1)).any()  # not one token over and over


@pytest.mark.parametrize("chunk", [5, 16])
def test_a_chunked_prefill_equals_one_pass(anna, chunk):
    text, shapes = CASES["two images"]
    ids, mm = prepare(anna, text, [random_image(*s) for s in shapes])
    whole = anna_logits(anna.model, ids, mm)
    torch.testing.assert_close(anna_logits(anna.model, ids, mm, chunk=chunk), whole, rtol=0, atol=1e-5)


@pytest.mark.parametrize("case", CASES)
def test_llm_greedy_tokens_match_hf_generate(ckpt, hf_runs, case):
    text, shapes = CASES[case]
    llm = LLM(ckpt, device="cpu", dtype="fp32", block_size=8, num_blocks=64, max_num_seqs=4, prompt_cache_size=0)
    [out] = llm.generate(text, GREEDY, media={"image": [random_image(*s) for s in shapes]})
    inputs, generated = hf_runs[case]
    assert out.error is None, out.error
    assert out.prompt_token_ids == inputs["input_ids"][0].tolist()
    assert out.token_ids == generated
