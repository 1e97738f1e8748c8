"""Every hook spec is documented in docs/plugins.md (as datasette's test_docs does), every registered kernel
op has a documented contract and its section in docs/ops.md, and both checks fail on an undocumented one."""

import inspect
import re
from pathlib import Path

from anna_core import hookspecs
from anna_core.hookspecs import hookimpl
from anna_core.kernels import OpContract, op_docs
from anna_core.plugins import kernel_specs, make_plugin_manager, op_contracts

DOC = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"
OPS_DOC = Path(__file__).resolve().parents[2] / "docs" / "ops.md"


def hook_names() -> list[str]:
    return [n for n in dir(hookspecs) if n.startswith("register_")]


def _sections() -> dict[str, str]:
    """``### name`` section of docs/plugins.md -> its text up to the next heading."""
    parts = re.split(r"^(#{2,3} .*)$", DOC.read_text(), flags=re.M)
    return {head[4:].strip(): body for head, body in zip(parts[1::2], parts[2::2]) if head.startswith("### ")}


def hook_problems(names: list[str], text: str) -> tuple[list[str], list[str]]:
    """``(hooks without a section, sections of no hook)`` of a page like docs/plugins.md."""
    documented = set(re.findall(r"^### (\w+)$", text, flags=re.M))
    return sorted(set(names) - documented), sorted(documented - set(names))


def test_every_hookspec_is_documented():
    names = hook_names()
    assert names, "no hook specs found"
    missing, stale = hook_problems(names, DOC.read_text())
    assert not missing, f"hook specs without a section in docs/plugins.md: {missing}"
    assert not stale, f"docs/plugins.md documents hooks that do not exist: {stale}"


def test_an_undocumented_hook_is_reported():
    """What the check above says when a hook spec is added without its section (or removed, leaving one)."""
    text = DOC.read_text()
    assert hook_problems([*hook_names(), "register_widgets"], text) == (["register_widgets"], [])
    assert hook_problems(hook_names()[1:], text) == ([], [hook_names()[0]])


def test_each_hook_section_opens_with_its_exact_signature():
    """A section's first paragraph starts with the hook's signature as the code declares it, so renaming or
    adding a parameter without updating the docs fails here."""
    sections = _sections()
    for name in hook_names():
        signature = f"{name}{inspect.signature(getattr(hookspecs, name))}"
        first = sections[name].strip().split("\n", 1)[0]
        assert first.startswith(f"`{signature}`"), f"docs/plugins.md's {name} section should open with `{signature}`"


def test_every_registered_op_has_a_documented_contract():
    pm = make_plugin_manager()  # every installed plugin
    contracts = {c.name: c for c in op_contracts(pm)}
    assert {"rms_norm", "linear_act_mul", "qk_norm_rope_cache", "fused_gdn_decode", "fused_gdn_prefill"} <= set(contracts)
    for contract in contracts.values():
        assert contract.signature.startswith(f"{contract.name}(") and " -> " in contract.signature
        assert len(contract.doc.split()) >= 10, f"op {contract.name!r}: its contract documents too little"
        assert ":" in contract.reference
    undocumented = sorted({spec.op for spec in kernel_specs(pm)} - set(contracts))
    assert not undocumented, f"kernel implementations of ops without a contract: {undocumented}"


def ops_without_examples(pm) -> list[str]:
    return sorted(c.name for c in op_contracts(pm) if not c.examples)


def test_every_registered_op_has_sample_inputs():
    """Each op contract declares ``examples`` (what the kernel conformance suite runs implementations on): a
    deterministic builder of a few cases whose shape facts are the op's own and which its reference accepts."""
    import torch
    from anna_core.registry import resolve

    bare = ops_without_examples(make_plugin_manager())
    assert not bare, f"ops without examples (OpContract.examples): {bare}"
    for contract in op_contracts(make_plugin_manager()):
        cases = resolve(contract.examples)("cpu", torch.float32)
        assert cases, f"op {contract.name!r}: its examples builder returned nothing"
        check = resolve(contract.check) if contract.check else None
        reference = resolve(contract.reference)
        for case in cases:
            assert set(case.shape) <= set(contract.shape_facts), (contract.name, case.shape)
            assert len(case.args) + len(case.kwargs) <= len(contract.parameters), contract.name
            if check is not None:
                check(*case.args, **case.kwargs)
            reference(*case.args, **case.kwargs)


def test_an_op_without_examples_is_reported():
    from anna_core.hookspecs import hookimpl
    from anna_core.kernels import OpContract

    class NoExamples:
        @hookimpl
        def register_ops(self, register):
            register(OpContract(name="docs_test_op", signature="docs_test_op(x) -> y",
                                doc="x: ``[N]`` float; ``y = x`` ``[N]`` in x's dtype.", reference="builtins:abs"))

    pm = make_plugin_manager()
    pm.register(NoExamples(), name="no_examples")
    assert ops_without_examples(pm) == ["docs_test_op"]


def test_every_registered_op_has_its_section_in_docs_ops_md():
    """docs/ops.md (``python -m anna_core.kernels.op_docs --write docs/ops.md``) has a section per registered op,
    opening with its exact signature and holding what the registry renders for it."""
    from anna_core.plugins import plugin_allow_list

    pm = make_plugin_manager(plugin_allow_list())  # as the anna_plugin_manager fixture builds it
    text = OPS_DOC.read_text()
    assert op_docs.missing_sections(pm, text) == []
    page, rendered = op_docs.sections(text), op_docs.sections(op_docs.render(pm))
    stale = sorted(name for name in rendered if (page.get(name) or "").strip() != rendered[name].strip())
    assert not stale, f"docs/ops.md sections out of date (regenerate with python -m anna_core.kernels.op_docs): {stale}"


class _ScaledTanhPlugin:
    @hookimpl
    def register_ops(self, register):
        register(OpContract(name="scaled_tanh", signature="scaled_tanh(x, scale) -> y",
                            doc="x: ``[..., D]`` float; scale: float. ``y = tanh(x) * scale`` in x's dtype.",
                            reference="math:tanh"))


def test_an_undocumented_op_is_reported(anna_plugin_manager, register_plugin):
    """A plugin that adds an op without its section in docs/ops.md, and a changed signature, are reported."""
    text = OPS_DOC.read_text()
    assert op_docs.missing_sections(anna_plugin_manager, text) == []
    register_plugin(_ScaledTanhPlugin(), name="scaled-tanh-test")
    assert op_docs.missing_sections(anna_plugin_manager, text) == ["scaled_tanh: no section"]
    changed = text.replace("`rms_norm(x, weight, eps, zero_centered)", "`rms_norm(x, weight, eps)")
    assert changed != text
    assert op_docs.missing_sections(anna_plugin_manager, changed) == [
        "rms_norm: the section does not open with `rms_norm(x, weight, eps, zero_centered) -> y`",
        "scaled_tanh: no section"]
