"""GGUF reading and model-directory rules, on tiny GGUF files written in-test with gguf.GGUFWriter."""

import numpy as np
import pytest
import torch
from anna_core.errors import ModelLoadError, UnsupportedModelError
from anna_core.model_dir import inspect_model_dir, select_family
from anna_core.registry import ModelFamilySpec
from anna_core.weights.gguf_reader import GGUFModelFile, read_gguf_architecture

from tests.core._gguf_fakes import write_gguf

gguf = pytest.importorskip("gguf")

LLAMA = ModelFamilySpec(name="llama", loader="x:y", model_types=("llama",), gguf_architectures=("llama",),
                        distribution="anna-llama")
W = np.arange(64, dtype=np.float32).reshape(2, 32)


def test_metadata_and_tensors_in_torch_order(tmp_path):
    rng = np.random.default_rng(0)
    q = gguf.quants.quantize(rng.standard_normal((3, 64)).astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
    path = write_gguf(tmp_path / "m.gguf", tensors={"w": W}, llama=True,
                      raw={"q": (q, gguf.GGMLQuantizationType.Q8_0)})
    assert read_gguf_architecture(path) == "llama"
    g = GGUFModelFile([path])
    assert g.architecture == "llama"
    assert g.arch_get("block_count") == 1 and g.arch_get("embedding_length") == 32
    assert g.arch_get("missing", 7) == 7
    with pytest.raises(ModelLoadError, match="lacks the metadata key 'llama.nope'"):
        g.arch_get("nope")
    assert g.tensors["w"].shape == (2, 32) and g.tensors["q"].shape == (3, 64)
    assert g.tensors["q"].type_name == "Q8_0"
    torch.testing.assert_close(g.tensor("w"), torch.from_numpy(W))
    np.testing.assert_array_equal(g.tensor("q").numpy(), gguf.quants.dequantize(q, gguf.GGMLQuantizationType.Q8_0))
    with pytest.raises(ModelLoadError, match="no tensor 'x'"):
        g.tensor("x")


def test_bad_magic_is_a_clear_error(tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(b"NOPE" + bytes(64))
    with pytest.raises(ModelLoadError, match="is not a GGUF file"):
        inspect_model_dir(path)
    with pytest.raises(ModelLoadError, match="is not a GGUF file"):
        GGUFModelFile([path])


@pytest.mark.parametrize("keep", [10, 40])
def test_truncated_header_fails_in_inspect(tmp_path, keep):
    path = write_gguf(tmp_path / "full.gguf", tensors={"w": W}, llama=True)
    cut = tmp_path / "cut" / "m.gguf"
    cut.parent.mkdir()
    cut.write_bytes(path.read_bytes()[:keep])
    with pytest.raises(ModelLoadError, match="truncated"):
        inspect_model_dir(cut.parent)


def test_truncated_tensor_data_fails_at_load(tmp_path):
    path = write_gguf(tmp_path / "full.gguf", tensors={"w": W}, llama=True)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[:-100])
    assert inspect_model_dir(cut).gguf_architecture == "llama"  # the header is intact
    with pytest.raises(ModelLoadError, match="truncated or corrupt"):
        GGUFModelFile([cut])


def test_unsupported_architecture_names_the_supported_ones(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", arch="mamba", tensors={"w": W})
    src = inspect_model_dir(path)
    assert src.format == "gguf" and src.gguf_architecture == "mamba"
    with pytest.raises(UnsupportedModelError, match=r"GGUF architecture 'mamba' is not supported.*\['llama'\]"):
        select_family(src, [LLAMA])


def test_folder_with_gguf_and_safetensors_asks_for_gguf_file(tmp_path):
    write_gguf(tmp_path / "m.gguf", tensors={"w": W})
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ModelLoadError, match="--gguf-file") as err:
        inspect_model_dir(tmp_path)
    assert "m.gguf" in str(err.value) and "safetensors" in str(err.value)
    assert inspect_model_dir(tmp_path, gguf_file="m.gguf").gguf_files == (tmp_path / "m.gguf",)


def test_folder_with_several_ggufs_asks_for_gguf_file(tmp_path):
    write_gguf(tmp_path / "a.Q4_1.gguf", tensors={"w": W})
    write_gguf(tmp_path / "a.Q8_0.gguf", tensors={"w": W})
    with pytest.raises(ModelLoadError, match="--gguf-file") as err:
        inspect_model_dir(tmp_path)
    assert "a.Q4_1.gguf" in str(err.value) and "a.Q8_0.gguf" in str(err.value)
    src = inspect_model_dir(tmp_path, gguf_file="a.Q8_0.gguf")
    assert src.gguf_files == (tmp_path / "a.Q8_0.gguf",)
    with pytest.raises(ModelLoadError, match="not found"):
        inspect_model_dir(tmp_path, gguf_file="b.gguf")


def test_split_gguf_loads_as_one(tmp_path):
    tensors = {"a": W, "b": np.ones(8, np.float32), "c": np.full(4, 3.0, np.float32)}
    write_gguf(tmp_path / "m.gguf", tensors=tensors, llama=True, split_max_tensors=2)
    parts = sorted(p.name for p in tmp_path.iterdir())
    assert parts == ["m-00001-of-00002.gguf", "m-00002-of-00002.gguf"]
    src = inspect_model_dir(tmp_path)  # one model, not "several GGUFs"
    assert [p.name for p in src.gguf_files] == parts
    # pointing at the second part also finds the whole model
    assert inspect_model_dir(tmp_path / parts[1]).gguf_files == src.gguf_files
    g = GGUFModelFile(src.gguf_files)
    assert set(g.tensors) == {"a", "b", "c"} and g.arch_get("block_count") == 1
    for name, value in tensors.items():
        np.testing.assert_array_equal(g.tensor(name).numpy(), value)
    with pytest.raises(ModelLoadError, match="split into 2 files, but 1 were given"):
        GGUFModelFile(src.gguf_files[:1])


def test_incomplete_split_is_an_error(tmp_path):
    write_gguf(tmp_path / "m.gguf", tensors={"a": W, "b": W}, split_max_tensors=1)
    (tmp_path / "m-00002-of-00002.gguf").unlink()
    with pytest.raises(ModelLoadError, match="incomplete"):
        inspect_model_dir(tmp_path)
