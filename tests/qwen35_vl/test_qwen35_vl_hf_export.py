"""The whole vision-language model exported to HF (``hf_export(multimodal=True)``, what the VL benchmark's HF side
runs on Anna's tensors) equals HF loading the checkpoint itself, fed the processor's ``hf_inputs`` for a prompt
with an image and a video; dense and mixture-of-experts layouts."""

from __future__ import annotations

import pytest
import torch

from tests.qwen35.conftest import load_anna
from tests.qwen35_vl.conftest import random_image

PROMPT = ("<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|> then "
          "<|vision_start|><|video_pad|><|vision_end|>: what changed?<|im_end|>\n")


@pytest.mark.parametrize("layout", ["dense", "moe"])
def test_exported_model_equals_hf_on_the_processor_inputs(layout, request):
    from anna_core.bench.hf_compare import build_hf
    from anna_core.testing.oracle import hf_model

    ckpt = request.getfixturevalue("tiny_vl" if layout == "dense" else "tiny_vl_moe")
    loaded = load_anna(ckpt)
    exported = build_hf(loaded, multimodal=True)
    assert type(exported).__name__ == ("Qwen3_5ForConditionalGeneration" if layout == "dense"
                                       else "Qwen3_5MoeForConditionalGeneration")
    assert exported.model.visual.blocks[0].attn.qkv.weight.data_ptr() == loaded.model.visual.blocks[0].attn.qkv.weight.data_ptr()
    frames = [random_image(20 + k, 32, 48) for k in range(4)]
    ids = loaded.tokenizer.encode(PROMPT, add_special_tokens=False)
    ids, mm = loaded.processor.process(ids, {"image": [random_image(5, 40, 56)], "video": [frames]})
    inputs = loaded.processor.hf_inputs(ids, mm)
    assert inputs["image_grid_thw"].tolist() == [[1, 4, 8]] and inputs["video_grid_thw"].tolist() == [[1, 4, 6]] * 2
    assert int((inputs["mm_token_type_ids"] == 2).sum()) == sum(m.length for m in mm.items if m.modality == "video")
    with torch.no_grad():
        got = exported(**inputs).logits
        want = hf_model(ckpt)(**inputs).logits
    assert torch.equal(got, want)


def test_a_text_model_has_no_multimodal_export(tmp_path):
    from anna_core.errors import ModelLoadError
    from anna_core.testing.checkpoints import build_tiny_qwen35

    loaded = load_anna(build_tiny_qwen35(tmp_path / "text"))
    with pytest.raises(ModelLoadError, match="vision tower"):
        loaded.model.hf_export(multimodal=True)
