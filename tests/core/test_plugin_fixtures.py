"""The plugin author's fixtures of ``anna_core.testing`` (``anna_plugin_manager``, ``register_plugin``,
``tiny_checkpoint``): each in this suite, and a plugin's own test file using them through pytester."""

from __future__ import annotations

import attrs
import pytest
from anna_core.hookspecs import hookimpl
from anna_core.plugins import BUILTIN_PLUGIN, describe_plugins, get_plugin_manager, model_families
from anna_core.registry import ModelFamilySpec
from anna_core.testing import cache_groups_family

pytest_plugins = ["pytester"]


class NoTinyPlugin:
    @hookimpl
    def register_model_families(self, register):
        register(ModelFamilySpec(name="no_tiny", loader="nowhere.loader:load", model_types=("no_tiny",)))


def test_the_manager_is_fresh_and_holds_the_installed_plugins(anna_plugin_manager):
    assert anna_plugin_manager is not get_plugin_manager()
    names = {name for name, _ in anna_plugin_manager.list_name_plugin()}
    assert BUILTIN_PLUGIN in names
    assert names == {name for name, _ in get_plugin_manager().list_name_plugin()}


def test_register_plugin_registers_on_the_tests_manager_only(anna_plugin_manager, register_plugin):
    name = register_plugin(cache_groups_family.PLUGIN, name="my_test_family")
    assert name == "my_test_family"
    assert "cache_groups_test" in {f.name for f in model_families(anna_plugin_manager)}
    assert "my_test_family" in {p["name"] for p in describe_plugins(anna_plugin_manager)}
    assert "cache_groups_test" not in {f.name for f in model_families()}  # the process-wide one is untouched


def test_register_plugin_unregisters_after_the_test(pytester):
    """Two tests of one session: what the first registers is gone in the second (a fresh manager each), and
    the teardown unregisters it from the first's manager too."""
    pytester.makepyfile(test_order='''
        from anna_core.plugins import model_families
        from anna_core.testing import cache_groups_family

        kept = []

        def test_registers(anna_plugin_manager, register_plugin):
            register_plugin(cache_groups_family.PLUGIN)
            kept.append(anna_plugin_manager)
            assert "cache_groups_test" in {f.name for f in model_families(anna_plugin_manager)}

        def test_is_gone(anna_plugin_manager):
            assert anna_plugin_manager is not kept[0]
            assert "cache_groups_test" not in {f.name for f in model_families(anna_plugin_manager)}
            assert "cache_groups_test" not in {f.name for f in model_families(kept[0])}
    ''')
    pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider").assert_outcomes(passed=2)


def test_tiny_checkpoint_writes_a_folder_the_family_loads(register_plugin, tiny_checkpoint, anna_plugin_manager,
                                                          tmp_path):
    from anna_core.loading import load_model

    register_plugin(cache_groups_family.PLUGIN)
    first, second = tiny_checkpoint("cache_groups_test", window=4), tiny_checkpoint("cache_groups_test")
    assert first != second and first.parent == second.parent == tmp_path
    loaded = load_model(first, device="cpu", dtype="fp32", pm=anna_plugin_manager)
    assert loaded.family == "cache_groups_test"
    assert loaded.model.cache_spec.groups[1].window == 4


def test_tiny_checkpoint_names_what_is_missing(register_plugin, tiny_checkpoint):
    register_plugin(cache_groups_family.PLUGIN)
    register_plugin(NoTinyPlugin())
    with pytest.raises(ValueError, match=r"no registered model family is named 'nope'.*cache_groups_test"):
        tiny_checkpoint("nope")
    with pytest.raises(ValueError, match=r"'no_tiny' family .*declares no tiny_checkpoint.*cache_groups_test"):
        tiny_checkpoint("no_tiny")


def test_a_family_spec_refuses_a_builder_that_is_not_lazy():
    with pytest.raises(ValueError, match="tiny_checkpoint must be a lazy"):
        attrs.evolve(cache_groups_family.FAMILY, tiny_checkpoint="write_config")


PLUGIN_TESTS = '''
"""A third party's family plugin, tested with anna-core's fixtures only (nothing installed for it)."""
import attrs
from anna_core.hookspecs import hookimpl
from anna_core.loading import load_model
from anna_core.plugins import describe_plugins, model_families
from anna_core.testing import cache_groups_family

FAMILY = attrs.evolve(cache_groups_family.FAMILY, name="my_family", distribution="my-family")


class MyPlugin:
    @hookimpl
    def register_model_families(self, register):
        register(FAMILY)


def test_the_plugin_is_listed(anna_plugin_manager, register_plugin):
    register_plugin(MyPlugin(), name="my_family")
    record = {p["name"]: p for p in describe_plugins(anna_plugin_manager)}["my_family"]
    assert [f["name"] for f in record["families"]] == ["my_family"]


def test_its_tiny_checkpoint_loads_and_generates(anna_plugin_manager, register_plugin, tiny_checkpoint):
    from anna_core.testing.runner import simple_greedy

    register_plugin(MyPlugin(), name="my_family")
    folder = tiny_checkpoint("my_family", window=4, seed=3)
    assert (folder / "config.json").is_file()
    loaded = load_model(folder, device="cpu", dtype="fp32", pm=anna_plugin_manager)
    prompt = [5, 9, 2, 7, 11, 3]
    assert simple_greedy(loaded.model, prompt, 6, block_size=4) == loaded.model.reference_greedy(prompt, 6)


def test_nothing_outlives_a_test(anna_plugin_manager):
    assert "my_family" not in {f.name for f in model_families(anna_plugin_manager)}
'''


def test_a_plugins_own_tests_use_the_fixtures(pytester):
    pytester.makepyfile(test_my_family=PLUGIN_TESTS)
    # its own process, as a plugin's suite runs (in-process runs re-import torch's extensions)
    pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider").assert_outcomes(passed=3)
