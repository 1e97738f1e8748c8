"""Every hook spec is documented in docs/plugins.md (as datasette's test_docs does), and every
registered kernel op has a documented contract."""

import re
from pathlib import Path

from anna_core import hookspecs
from anna_core.plugins import kernel_specs, make_plugin_manager, op_contracts

DOC = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"


def hook_names() -> list[str]:
    return [n for n in dir(hookspecs) if n.startswith("register_")]


def test_every_hookspec_is_documented():
    documented = set(re.findall(r"^### (\w+)$", DOC.read_text(), flags=re.M))
    names = hook_names()
    assert len(names) == 8
    missing = sorted(set(names) - documented)
    assert not missing, f"hook specs without a section in docs/plugins.md: {missing}"
    stale = sorted(documented - set(names))
    assert not stale, f"docs/plugins.md documents hooks that do not exist: {stale}"


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
