"""Loading Qwen3.5 vision-language checkpoints: the tower's tensors load like any other (missing or mis-shaped is
an error), the processor comes from the checkpoint's preprocessor config, and a folder without one serves text."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from anna_core.errors import ModelLoadError, UnsupportedModelError
from safetensors.torch import load_file, save_file

from tests.qwen35.conftest import load_anna
from tests.qwen35_vl.conftest import random_image


@pytest.fixture
def copy(tiny_vl, tmp_path):
    """A writable copy of the tiny checkpoint."""
    return shutil.copytree(tiny_vl, tmp_path / "vl")


def _edit_weights(path, edit):
    tensors = load_file(str(path / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})


def _edit_config(path, name, edit):
    data = json.loads((path / name).read_text())
    edit(data)
    (path / name).write_text(json.dumps(data))


def test_a_missing_vision_tensor_is_a_load_error(copy):
    _edit_weights(copy, lambda t: t.pop("model.visual.blocks.1.attn.qkv.weight"))
    with pytest.raises(ModelLoadError, match=r"visual\.blocks\.1\.attn\.qkv\.weight"):
        load_anna(copy)


def test_a_mis_shaped_vision_tensor_is_a_load_error(copy):
    def edit(t):
        t["model.visual.pos_embed.weight"] = torch.zeros(25, 32)

    _edit_weights(copy, edit)
    with pytest.raises(ModelLoadError, match="pos_embed"):
        load_anna(copy)


def test_a_preprocessor_config_that_does_not_fit_the_tower_is_refused(copy):
    _edit_config(copy, "preprocessor_config.json", lambda c: c.update(patch_size=14))
    with pytest.raises(ModelLoadError, match="patch_size"):
        load_anna(copy)


def test_deepstack_features_are_refused(copy):
    _edit_config(copy, "config.json", lambda c: c["vision_config"].update(deepstack_visual_indexes=[0]))
    with pytest.raises(UnsupportedModelError, match="deepstack"):
        load_anna(copy)


def test_without_a_preprocessor_config_the_checkpoint_serves_text(copy, tiny_vl):
    (copy / "preprocessor_config.json").unlink()
    text = load_anna(copy)
    assert text.processor is None and text.model.visual is None
    assert text.model.capabilities.modalities == () and text.model.capabilities.position_rows == 1
    from anna_core.testing.runner import prefill_logits

    ids = text.tokenizer.encode("Hello, world! How are you today?")
    full = load_anna(tiny_vl)
    torch.testing.assert_close(prefill_logits(text.model, ids), prefill_logits(full.model, ids), rtol=0, atol=1e-5)


def test_dummy_weights_give_a_working_tower(tiny_vl):
    loaded = load_anna(tiny_vl, load_format="dummy")
    assert loaded.model.capabilities.modalities == ("image", "video")
    _, mm = loaded.processor.process(loaded.tokenizer.encode("<|image_pad|>"), {"image": [random_image(1, 56, 56)]})
    [rows] = loaded.model.encode(list(mm.items))
    assert rows.shape == (16, 64) and torch.isfinite(rows).all()
    assert rows.std(0).max() > 0  # LayerNorm scales of one: the rows differ from patch to patch


def test_image_processor_class_falls_back_when_the_pil_name_cannot_import(monkeypatch):
    """transformers 5.17 lists ``Qwen2VLImageProcessorPil`` but raises ModuleNotFoundError on access (seen on the GPU
    machine's image): the older ``Qwen2VLImageProcessor`` is used instead of failing the load."""
    import sys
    import types

    import transformers
    from anna_qwen35.processor import pil_image_processor_class

    class Fallback:
        pass

    class Release(types.ModuleType):
        Qwen2VLImageProcessor = Fallback

        def __getattr__(self, name):
            raise ModuleNotFoundError(f"Could not import module '{name}'")

    assert pil_image_processor_class() is transformers.Qwen2VLImageProcessorPil
    monkeypatch.setitem(sys.modules, "transformers", Release("transformers"))
    assert pil_image_processor_class() is Fallback
