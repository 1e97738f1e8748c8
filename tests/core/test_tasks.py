"""Tasks (``register_tasks``): anna-core's ``generate``, lookups by family, and the refusals."""

from __future__ import annotations

import pytest
from anna_core import builtin_plugin
from anna_core.errors import AnnaError, UnsupportedModelError
from anna_core.hookspecs import hookimpl
from anna_core.plugins import get_plugin_manager, make_plugin_manager, model_families, task_for, tasks
from anna_core.registry import ModelFamilySpec, TaskSpec

from tests.server.echo_task import FAMILY, TASK, echo_registered, register_echo, write_checkpoint


def core_only():
    pm = make_plugin_manager(load_entry_points=False)
    pm.register(builtin_plugin, name="anna_core_reference")
    return pm


def test_anna_core_registers_the_generate_task():
    [generate] = [t for t in tasks(make_plugin_manager(set())) if t.name == "generate"]
    assert generate is builtin_plugin.GENERATE_TASK
    assert (generate.engine, generate.serving, generate.routes) == (
        "anna_core.tasks.generate:build", "anna_core.tasks.generate:start", "anna_core.server.routes_generate:ROUTES")
    assert generate.distribution == "anna-core"


def test_families_default_to_generate_and_installed_ones_resolve_to_it():
    from anna_core.testing.cache_groups_family import plugin_manager

    pm = plugin_manager()  # anna-core's test family (tests/qwen35/test_qwen35_plugin.py: Qwen3.5's)
    fams = {f.name: f for f in model_families(pm)}
    assert fams["cache_groups_test"].tasks == ("generate",)
    assert task_for(fams["cache_groups_test"], pm) is builtin_plugin.GENERATE_TASK


def test_the_main_task_is_the_first_and_others_are_chosen_by_name():
    pm = register_echo(core_only())
    both = ModelFamilySpec(name="both", loader="m:load", tasks=("echo", "generate"))
    assert task_for(both, pm).name == "echo"
    assert task_for(both, pm, name="generate") is builtin_plugin.GENERATE_TASK
    with pytest.raises(UnsupportedModelError, match=r"the 'both' family serves the task\(s\) echo, generate, "
                                                     r"not 'speech'"):
        task_for(both, pm, name="speech")


class _SecondGenerate:
    @hookimpl
    def register_tasks(self, register):
        register(TaskSpec(name="generate", engine="x:build", serving="x:start", routes="x:ROUTES",
                          distribution="anna-other"))


def test_two_plugins_registering_one_task_name_are_refused():
    pm = core_only()
    pm.register(_SecondGenerate(), name="other")
    with pytest.raises(AnnaError, match="two plugins register the task 'generate' .*anna-core.*anna-other"):
        tasks(pm)
    with pytest.raises(AnnaError, match="two plugins register the task 'generate'"):
        task_for(ModelFamilySpec(name="f", loader="m:load"), pm)


def test_a_family_whose_task_is_not_installed_names_the_task_and_what_to_install():
    pm = register_echo(core_only(), task=False)
    with pytest.raises(UnsupportedModelError, match=r"the 'echo_test' family needs the task 'echo', which no "
                                                     r"installed plugin registers \(installed tasks: generate\); "
                                                     r"install anna-echo-test"):
        task_for(FAMILY, pm)
    asr = ModelFamilySpec(name="qwen3_asr", loader="m:load", tasks=("transcribe",))
    with pytest.raises(UnsupportedModelError, match="'transcribe'.*install anna-audio"):
        task_for(asr, pm)


def test_specs_are_checked_when_made():
    with pytest.raises(ValueError, match="tasks must be distinct non-empty names"):
        ModelFamilySpec(name="f", loader="m:load", tasks=())
    with pytest.raises(ValueError, match="tasks must be distinct"):
        ModelFamilySpec(name="f", loader="m:load", tasks=("generate", "generate"))
    assert ModelFamilySpec(name="f", loader="m:load", tasks=["echo"]).tasks == ("echo",)
    with pytest.raises(ValueError, match="TaskSpec.serving must be a lazy 'package.module:attr' string"):
        TaskSpec(name="t", engine="m:build", serving=print, routes="m:ROUTES")
    with pytest.raises(ValueError):
        TaskSpec(name="", engine="m:build", serving="m:start", routes="m:ROUTES")


def test_llm_refuses_a_family_without_the_generate_task_before_loading(tmp_path):
    from anna_core import LLM

    with echo_registered(get_plugin_manager()), \
            pytest.raises(UnsupportedModelError, match=r"the 'echo_test' family serves the task\(s\) echo, "
                                                        r"not 'generate'"):
        LLM(write_checkpoint(tmp_path / "echo"), device="cpu")


def test_the_echo_task_builds_and_starts_through_its_lazy_strings():
    import asyncio

    from anna_core.registry import resolve

    from tests.server.echo_task import load

    loaded = load(None, device="cpu", dtype=None, load_format="auto", kernels=None)
    engine = resolve(TASK.engine)(loaded, None, None)
    client = resolve(TASK.serving)(engine)
    assert engine.max_model_len == 0 and asyncio.run(client.echo("abc")) == "cba"
    assert client.stats() == {"served": 1, "warmed_up": False}


def test_check_task_names_a_target_that_does_not_import():
    import attrs
    from anna_core.errors import AnnaError
    from anna_core.plugins import check_task

    from tests.server.echo_task import TASK

    check_task(TASK)  # every target imports
    for field, bad in (("routes", "tests.server.echo_task:NOPE"), ("engine", "tests.server.no_such_module:build")):
        with pytest.raises(AnnaError, match=f"'echo' task's {field} '{bad}' .* does not import"):
            check_task(attrs.evolve(TASK, **{field: bad}))
