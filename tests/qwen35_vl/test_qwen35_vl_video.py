"""Video on the tiny Qwen3.5 vision-language checkpoint: Anna's own preprocessing against transformers' Qwen3-VL
video processor (its settings, its ``smart_resize``, its rescale / normalise / patchify run on the frames Anna
resized: only its torchvision resize cannot run here), the timestamped prompt layout against
``Qwen3VLProcessor.replace_video_token``, positions against ``get_rope_index``, and logits (1e-4) and 32 greedy
tokens against HF with the same ``pixel_values_videos`` / ``video_grid_thw``."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from anna_core import LLM, SamplingParams
from anna_core.errors import InvalidRequestError
from anna_core.testing.oracle import hf_greedy_inputs
from anna_qwen35.video import VideoSettings, video_frame_size, video_patches

from tests.qwen35.conftest import load_anna
from tests.qwen35_vl.conftest import hf_logits_video, hf_video_inputs, random_image

N = 32
GREEDY = SamplingParams(temperature=0.0, max_tokens=N, ignore_eos=True)
VIDEO_PROMPT = "<|im_start|>user\nWhat happens in <|vision_start|><|video_pad|><|vision_end|>?<|im_end|>\n"
MIXED_PROMPT = ("<|im_start|>user\n<|vision_start|><|video_pad|><|vision_end|> then "
                "<|vision_start|><|image_pad|><|vision_end|>: same scene?<|im_end|>\n")


def frames(n: int, height: int = 40, width: int = 56, seed: int = 10) -> list:
    return [random_image(seed + i, height, width) for i in range(n)]


@pytest.fixture(scope="module")
def anna(tiny_vl):
    return load_anna(tiny_vl)


@pytest.fixture(scope="module")
def hf_video_processor(tiny_vl):
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    processor = Qwen3VLVideoProcessor.from_pretrained(str(tiny_vl))
    # its normalize is torchvision's ``normalize`` (per channel ``(x - mean) / std``); the rest runs as shipped
    processor.normalize = lambda image, mean, std, **_: (image - mean.view(-1, 1, 1)) / std.view(-1, 1, 1)
    return processor


def test_settings_are_those_transformers_reads(anna, hf_video_processor):
    s, hf = anna.processor.video.settings, hf_video_processor
    assert (s.patch_size, s.temporal_patch_size, s.merge_size) == (hf.patch_size, hf.temporal_patch_size,
                                                                   hf.merge_size)
    assert (s.min_pixels, s.max_pixels) == (hf.size.shortest_edge, hf.size.longest_edge)
    assert (s.fps, s.rescale_factor, s.resample) == (hf.fps, hf.rescale_factor, hf.resample)
    assert s.image_mean == tuple(hf.image_mean) and s.image_std == tuple(hf.image_std)


def test_frame_size_is_transformers_smart_resize():
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import smart_resize

    settings = VideoSettings(patch_size=8, temporal_patch_size=2, merge_size=2, min_pixels=4096, max_pixels=65536)
    cases = [(t, h, w) for t in (2, 3, 4, 5, 8, 17) for h, w in [(40, 56), (8, 300), (480, 640), (15, 15),
                                                                 (1080, 1920), (64, 64), (33, 97)]]
    for t, h, w in cases:
        want = smart_resize(t, h, w, temporal_factor=2, factor=16, min_pixels=4096, max_pixels=65536)
        assert video_frame_size(t, h, w, settings) == want, (t, h, w)
    with pytest.raises(InvalidRequestError, match="aspect ratio"):
        video_frame_size(4, 16, 16 * 201, settings)


def hf_patches(processor, clip: list, settings: VideoSettings):
    """transformers' rescale, normalise and patchify (``_preprocess`` without its resize) of ``clip`` resized with
    PIL to ``smart_resize``'s size."""
    from transformers.image_utils import SizeDict
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import smart_resize

    w0, h0 = clip[0].size
    h, w = smart_resize(len(clip), h0, w0, temporal_factor=2, factor=settings.factor,
                        min_pixels=settings.min_pixels, max_pixels=settings.max_pixels)
    video = torch.from_numpy(np.stack([np.asarray(f.resize((w, h), resample=3)) for f in clip])).permute(0, 3, 1, 2)
    out = processor._preprocess(
        [video.contiguous()], do_resize=False, size=SizeDict(shortest_edge=settings.min_pixels,
                                                             longest_edge=settings.max_pixels),
        resample=3, do_rescale=True, rescale_factor=settings.rescale_factor, do_normalize=True,
        image_mean=settings.image_mean, image_std=settings.image_std, patch_size=settings.patch_size,
        temporal_patch_size=settings.temporal_patch_size, merge_size=settings.merge_size,
        cap_pixels_per_frame=False, return_tensors="pt")
    return out["pixel_values_videos"], out["video_grid_thw"]


@pytest.mark.parametrize("shape", [(4, 40, 56), (3, 40, 56), (6, 120, 200), (2, 9, 30)])
def test_patches_equal_transformers_video_processor(anna, hf_video_processor, shape):
    n, h, w = shape
    clip = frames(n, h, w)
    settings = anna.processor.video.settings
    pixels, grid = video_patches(clip, settings)
    ref, ref_grid = hf_patches(hf_video_processor, clip, settings)
    assert [list(grid)] == ref_grid.tolist()
    assert pixels.dtype == torch.float32 and pixels.shape == ref.shape
    torch.testing.assert_close(pixels, ref, rtol=0, atol=1e-6)


def test_two_equal_frames_patch_as_the_image_processor_patches_one_image(anna):
    """An image is a temporal patch of one frame repeated: a two-frame clip of it gives the image's patches (its
    size needs no resize under either rule)."""
    from transformers import Qwen2VLImageProcessorPil

    image = random_image(3, 32, 48)
    pixels, grid = video_patches([image, image.copy()], anna.processor.video.settings)
    assert isinstance(anna.processor.image_processor, Qwen2VLImageProcessorPil)
    out = anna.processor.image_processor(images=[image], return_tensors="pt")
    assert [list(grid)] == out["image_grid_thw"].tolist()
    torch.testing.assert_close(pixels, out["pixel_values"].float(), rtol=0, atol=1e-6)


def test_a_single_frame_is_one_temporal_patch_and_mixed_sizes_are_refused(anna):
    settings = anna.processor.video.settings
    [image] = frames(1)
    one, grid = video_patches([image], settings)
    two, grid2 = video_patches([image, image], settings)
    assert grid == grid2 and torch.equal(one, two)
    with pytest.raises(InvalidRequestError, match="one size"):
        video_patches([image, random_image(1, 32, 32)], settings)


CASES = {
    "four frames": (VIDEO_PROMPT, [(4, 40, 56)], []),
    "five frames": (VIDEO_PROMPT, [(5, 48, 32)], []),
    "video and image": (MIXED_PROMPT, [(4, 32, 48)], [(2, 56, 56)]),
}


def case_media(case):
    text, clips, images = CASES[case]
    return text, [frames(*c, seed=20 + i) for i, c in enumerate(clips)], [random_image(*s) for s in images]


def media_dict(clips, images):
    return {"video": clips, **({"image": images} if images else {})}


@pytest.mark.parametrize("case", CASES)
def test_prompt_ids_and_positions_match_hf(anna, hf_vl, tiny_vl, case):
    text, clips, images = case_media(case)
    ids, mm = anna.processor.process(anna.tokenizer.encode(text), media_dict(clips, images))
    inputs = hf_video_inputs(tiny_vl, text, clips, images)
    assert ids == inputs["input_ids"][0].tolist()
    pos, delta = hf_vl.model.get_rope_index(inputs["input_ids"], inputs["mm_token_type_ids"],
                                            inputs.get("image_grid_thw"), inputs["video_grid_thw"])
    assert [list(r) for r in mm.positions] == pos[:, 0].tolist()
    assert mm.position_delta == int(delta[0, 0])
    groups = [m for m in mm.items if m.modality == "video"]
    t = sum(g[0] for g in inputs["video_grid_thw"].tolist())
    assert len(groups) == t and all(m.data["grid_thw"][0] == 1 for m in groups)
    torch.testing.assert_close(torch.cat([m.data["pixel_values"] for m in groups]), inputs["pixel_values_videos"],
                               rtol=0, atol=0)


def test_decoded_video_timestamps_are_its_frame_times(anna):
    from anna_core.media import DecodedVideo

    clip = frames(4)
    video = DecodedVideo(clip, 10.0, 2.0, [0.0, 0.5, 1.0, 1.5])
    shifted = DecodedVideo(clip, 10.0, 4.0, [2.0, 2.5, 3.0, 3.5])
    ids = anna.tokenizer.encode(VIDEO_PROMPT)
    a, _ = anna.processor.process(ids, {"video": [video]})
    b, _ = anna.processor.process(ids, {"video": [clip]}, {"fps": 2})
    c, _ = anna.processor.process(ids, {"video": [shifted]})
    assert a == b and a != c
    text = anna.tokenizer.decode(c, skip_special_tokens=False)
    assert "<2.2 seconds>" in text and "<3.2 seconds>" in text  # the mean of each pair of frame times


def test_video_options_are_checked(anna):
    ids = anna.tokenizer.encode(VIDEO_PROMPT)
    with pytest.raises(InvalidRequestError, match="max_frames"):
        anna.processor.process(ids, {"video": [frames(6)]}, {"max_frames": 4})
    with pytest.raises(InvalidRequestError, match="fps"):
        anna.processor.process(ids, {"video": [frames(2)]}, {"fps": 0})
    with pytest.raises(InvalidRequestError, match="1 video placeholders"):
        anna.processor.process(ids, {"video": [frames(2), frames(2)]})


@pytest.fixture(scope="module")
def hf_runs(hf_vl, tiny_vl):
    out = {}
    for case in CASES:
        text, clips, images = case_media(case)
        inputs = hf_video_inputs(tiny_vl, text, clips, images)
        out[case] = (inputs, hf_greedy_inputs(hf_vl, inputs, N))
    return out


@pytest.mark.parametrize("case", CASES)
def test_logits_match_hf(anna, hf_vl, hf_runs, case):
    from tests.qwen35_vl.test_qwen35_vl_parity import anna_logits

    text, clips, images = case_media(case)
    ids, mm = anna.processor.process(anna.tokenizer.encode(text), media_dict(clips, images))
    inputs, generated = hf_runs[case]
    ref = hf_logits_video(hf_vl, inputs, generated)
    got = anna_logits(anna.model, ids + generated, mm)
    assert got.shape == ref.shape
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-4)
    assert (got[-N:].argmax(-1) != got[-N - 1:-1].argmax(-1)).any()


def test_frame_groups_encode_as_the_whole_video(anna, hf_vl):
    text, clips, _ = case_media("four frames")
    _, mm = anna.processor.process(anna.tokenizer.encode(text), {"video": clips})
    pixels = torch.cat([m.data["pixel_values"] for m in mm.items])
    t, (_, h, w) = len(mm.items), mm.items[0].data["grid_thw"]
    with torch.no_grad():
        [ref] = hf_vl.model.get_video_features(pixels, torch.tensor([[t, h, w]])).pooler_output
    got = torch.cat(anna.model.encode(list(mm.items)))
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-5 * ref.abs().max().item())


@pytest.mark.parametrize("case", CASES)
def test_llm_greedy_tokens_match_hf_generate(tiny_vl, hf_runs, case):
    text, clips, images = case_media(case)
    llm = LLM(tiny_vl, device="cpu", dtype="fp32", block_size=8, num_blocks=64, max_num_seqs=4, prompt_cache_size=0)
    [out] = llm.generate(text, GREEDY, media=media_dict(clips, images))
    inputs, generated = hf_runs[case]
    assert out.error is None, out.error
    assert out.prompt_token_ids == inputs["input_ids"][0].tolist()
    assert out.token_ids == generated


def test_the_moe_layout_matches_hf_generate_with_a_video_and_an_image(tiny_vl_moe):
    from anna_core.testing.oracle import hf_model

    text, clips, images = case_media("video and image")
    inputs = hf_video_inputs(tiny_vl_moe, text, clips, images)
    llm = LLM(tiny_vl_moe, device="cpu", dtype="fp32", block_size=8, num_blocks=64, max_num_seqs=2,
              prompt_cache_size=0)
    [out] = llm.generate(text, GREEDY, media=media_dict(clips, images))
    assert out.error is None, out.error
    assert out.prompt_token_ids == inputs["input_ids"][0].tolist()
    assert out.token_ids == hf_greedy_inputs(hf_model(tiny_vl_moe), inputs, N)
