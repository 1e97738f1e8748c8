"""Every hook spec is documented in docs/plugins.md (as datasette's test_docs does)."""

import re
from pathlib import Path

from anna_core import hookspecs

DOC = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"


def hook_names() -> list[str]:
    return [n for n in dir(hookspecs) if n.startswith("register_")]


def test_every_hookspec_is_documented():
    documented = set(re.findall(r"^### (\w+)$", DOC.read_text(), flags=re.M))
    names = hook_names()
    assert len(names) == 6
    missing = sorted(set(names) - documented)
    assert not missing, f"hook specs without a section in docs/plugins.md: {missing}"
    stale = sorted(documented - set(names))
    assert not stale, f"docs/plugins.md documents hooks that do not exist: {stale}"
