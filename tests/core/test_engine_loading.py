"""load_model: folder -> family (through the plugins) -> loader called with device, dtype, kernels."""

import json

import pytest
import torch
from anna_core.errors import AnnaError, ModelLoadError, UnsupportedModelError
from anna_core.hookspecs import hookimpl
from anna_core.kernels import KernelRegistry
from anna_core.loading import load_model
from anna_core.plugins import make_plugin_manager
from anna_core.registry import ModelFamilySpec

CALLS = []


def fake_loader(source, *, device, dtype, load_format, kernels, chat_template=None):
    CALLS.append((source.config["model_type"], device, dtype, load_format, kernels, chat_template))
    return "loaded"


class FakeFamily:
    @hookimpl
    def register_model_families(self, register):
        register(ModelFamilySpec(name="fake", loader="tests.core.test_engine_loading:fake_loader",
                                 model_types=("fake_lm",), distribution="anna-fake"))
        register(ModelFamilySpec(name="broken", loader="no_such_module_xyz:load", model_types=("broken_lm",),
                                 distribution="anna-broken"))


@pytest.fixture
def pm():
    pm = make_plugin_manager(load_entry_points=False)
    pm.register(FakeFamily(), name="fake")
    return pm


def model_dir(tmp_path, model_type, **extra):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type, **extra}))
    return tmp_path


def test_family_loader_gets_device_dtype_and_kernels(tmp_path, pm):
    CALLS.clear()
    path = model_dir(tmp_path, "fake_lm", torch_dtype="bfloat16")
    assert load_model(path, device="cpu", dtype="auto", load_format="dummy", chat_template="T", pm=pm) == "loaded"
    [(mtype, device, dtype, fmt, kernels, template)] = CALLS
    assert (mtype, device, dtype, fmt, template) == ("fake_lm", torch.device("cpu"), torch.float32, "dummy", "T")
    assert isinstance(kernels, KernelRegistry)
    load_model(path, device="cpu", dtype="bf16", pm=pm)
    assert CALLS[-1][2] == torch.bfloat16


def test_errors_are_clear(tmp_path, pm):
    (tmp_path / "a").mkdir()
    with pytest.raises(UnsupportedModelError, match="'mystery'.*supported model types: \\['broken_lm', 'fake_lm'\\]"):
        load_model(model_dir(tmp_path / "a", "mystery"), pm=pm)
    (tmp_path / "b").mkdir()
    with pytest.raises(ModelLoadError, match="anna-broken"):
        load_model(model_dir(tmp_path / "b", "broken_lm"), device="cpu", pm=pm)
    with pytest.raises(AnnaError, match="unknown load format"):
        load_model(tmp_path / "b", load_format="pickle", pm=pm)
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model(tmp_path / "missing", pm=pm)
