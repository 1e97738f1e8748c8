"""Checks across every installed distribution (this file belongs to none, so it runs in the environment that
has them all: tools/test.sh's .venv): every kernel implementation has an op contract, docs/ops.md is exactly
what the registry renders (no section missing, stale or out of date)."""

from pathlib import Path

from anna_core.kernels import op_docs
from anna_core.plugins import kernel_specs, make_plugin_manager, op_contracts

OPS_DOC = Path(__file__).resolve().parents[1] / "docs" / "ops.md"


def test_the_whole_set_of_distributions_is_installed():
    names = {pm_name for pm_name, _ in make_plugin_manager().list_name_plugin()}
    assert {"anna_core_reference", "anna_qwen35", "anna_gemma4", "anna_xpu_kernels", "anna_cli"} <= names


def test_every_kernel_implementation_has_an_op_contract():
    pm = make_plugin_manager()
    specs = kernel_specs(pm)
    assert any(spec.name == "triton" for spec in specs)  # anna-xpu-kernels' implementations are among them
    undocumented = sorted({spec.op for spec in specs} - {c.name for c in op_contracts(pm)})
    assert not undocumented, f"kernel implementations of ops without a contract: {undocumented}"


def test_docs_ops_md_is_the_rendered_registry():
    rendered = op_docs.render(make_plugin_manager())
    page = OPS_DOC.read_text()
    assert op_docs.sections(page).keys() == op_docs.sections(rendered).keys(), "regenerate: python -m anna_core.kernels.op_docs --write docs/ops.md"
    assert page == rendered, "docs/ops.md is out of date: python -m anna_core.kernels.op_docs --write docs/ops.md"
