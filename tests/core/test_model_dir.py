"""Model-directory inspection and family selection: from metadata, never from paths."""

import json

import pytest
from anna_core.errors import ModelLoadError, UnsupportedModelError
from anna_core.model_dir import ModelSource, inspect_model_dir, select_family
from anna_core.registry import ModelFamilySpec

QWEN = ModelFamilySpec(name="qwen35", loader="x:y", model_types=("qwen3_5", "qwen3_5_text"),
                       architectures=("Qwen3_5ForCausalLM",), distribution="anna-qwen35")
LLAMA = ModelFamilySpec(name="llama", loader="x:y", model_types=("llama",), gguf_architectures=("llama",))


def write_config(path, **cfg):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(cfg))
    return path


def test_family_from_model_type_not_path(tmp_path):
    d = write_config(tmp_path / "llama-looking-name", model_type="qwen3_5_text")
    src = inspect_model_dir(d)
    assert src.format == "safetensors"
    assert select_family(src, [LLAMA, QWEN]).name == "qwen35"


def test_family_from_architectures_when_model_type_unknown(tmp_path):
    d = write_config(tmp_path / "m", model_type="custom", architectures=["Qwen3_5ForCausalLM"])
    assert select_family(inspect_model_dir(d), [LLAMA, QWEN]).name == "qwen35"


def test_unknown_model_type_lists_supported_and_names_distribution(tmp_path):
    d = write_config(tmp_path / "m", model_type="gemma4", architectures=["Gemma4ForConditionalGeneration"])
    with pytest.raises(UnsupportedModelError) as err:
        select_family(inspect_model_dir(d), [LLAMA, QWEN])
    msg = str(err.value)
    assert "'gemma4'" in msg and "qwen3_5_text" in msg and "llama" in msg and "anna-gemma4" in msg


def test_nothing_falls_through_to_a_default(tmp_path):
    d = write_config(tmp_path / "m", model_type="totally_new")
    with pytest.raises(UnsupportedModelError, match="totally_new"):
        select_family(inspect_model_dir(d), [QWEN])


def test_gguf_family_from_general_architecture():
    src = ModelSource("gguf", root=__import__("pathlib").Path("."), gguf_architecture="llama")
    assert select_family(src, [QWEN, LLAMA]).name == "llama"
    with pytest.raises(UnsupportedModelError, match="'qwen2'"):
        select_family(ModelSource("gguf", root=src.root, gguf_architecture="qwen2"), [QWEN, LLAMA])


@pytest.mark.parametrize("setup, message", [
    (lambda p: None, "does not exist"),
    (lambda p: p.mkdir(), "no config.json"),
    (lambda p: (p.mkdir(), (p / "config.json").write_text("{nope")), "not valid JSON"),
])
def test_bad_model_dirs(tmp_path, setup, message):
    p = tmp_path / "m"
    setup(p)
    with pytest.raises(ModelLoadError, match=message):
        inspect_model_dir(p)
