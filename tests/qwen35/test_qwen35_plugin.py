"""anna-qwen35's plugin: its family is registered and serves the ``generate`` task, and the allow-list loads it
(moved from tests/core, which checks these on test plugins of its own)."""

import subprocess
import sys

from anna_core import builtin_plugin
from anna_core.plugins import make_plugin_manager, model_families, task_for


def test_qwen35_family_is_registered():
    fams = {f.name: f for f in model_families(make_plugin_manager())}
    assert "qwen35" in fams
    assert "qwen3_5_text" in fams["qwen35"].model_types


def test_qwen35_family_defaults_to_generate():
    fams = {f.name: f for f in model_families(make_plugin_manager())}
    assert fams["qwen35"].tasks == ("generate",)
    assert task_for(fams["qwen35"]) is builtin_plugin.GENERATE_TASK


def test_allow_list_env_loads_anna_qwen35_and_the_reference_kernels():
    code = ("from anna_core.plugins import get_plugin_manager; "
            "print(sorted(n for n, _ in get_plugin_manager().list_name_plugin()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"ANNA_LOAD_PLUGINS": "anna_qwen35", "PATH": ""})
    assert out.stdout.strip() == "['anna_core_reference', 'anna_qwen35']"


def test_the_family_offers_a_tiny_checkpoint(tiny_checkpoint, anna_plugin_manager):
    """``tiny_checkpoint("qwen35", ...)`` (the family's declared builder) writes a folder the family loads, with
    its tokenizer, whose logits are HF's."""
    from anna_core.testing.tiny import load_against_hf

    loaded, error = load_against_hf(tiny_checkpoint("qwen35", tie=False, seed=3), pm=anna_plugin_manager)
    assert loaded.family == "qwen35" and loaded.tokenizer is not None
    assert error <= 1e-4
