"""``docs/ops.md``: one section per op contract of the installed plugins, rendered from the op registry.

    python -m anna_core.kernels.op_docs [--write docs/ops.md]

Each section is headed ``### <name>`` and opens with the contract's exact signature in backticks, then the
plugin that registers it, its doc (the contract proper), the torch reference, the shared argument check, the
shape facts probes may decide on and whether it has sample inputs. ``tests/core/test_docs.py`` checks that
every registered op has its section opening with its signature (:func:`missing_sections`), so an op added or a
signature changed without regenerating the page fails the suite.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

HEADER = """# Op contracts

Every kernel op the installed plugins register (`register_ops`, `docs/plugins.md`), one section each: its
signature (the parameter names as its torch reference spells them), the plugin that registers it and the
contract every implementation follows. Generated from the op registry by
`python -m anna_core.kernels.op_docs --write docs/ops.md` (with every Anna distribution installed);
`tests/core/test_docs.py` fails when a registered op has no section here or its signature differs.
"""


def contracts_by_plugin(pm: Any) -> list[tuple[str, Any]]:
    """``(plugin name, OpContract)`` for every op ``pm``'s plugins register, sorted by op name."""
    from anna_core.plugins import _own

    found = []
    for plugin in pm.get_plugins():
        found += [(pm.get_name(plugin), c) for c in _own(pm, plugin, "register_ops")]
    return sorted(found, key=lambda pc: pc[1].name)


def render(pm: Any) -> str:
    """The whole page (markdown) for the ops of ``pm``'s plugins."""
    parts = [HEADER]
    for plugin, c in contracts_by_plugin(pm):
        lines = [f"### {c.name}", "", f"`{c.signature}` — registered by `{plugin}`.", "", c.doc.strip(), "",
                 f"- reference: `{c.reference}`"]
        if c.check:
            lines.append(f"- argument check: `{c.check}`")
        if c.shape_facts:
            lines.append(f"- shape facts: {', '.join(f'`{f}`' for f in c.shape_facts)}")
        lines.append(f"- sample inputs: `{c.examples}`" if c.examples else "- sample inputs: none")
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


def sections(text: str) -> dict[str, str]:
    """``### name`` section of a page -> its text up to the next heading."""
    parts = re.split(r"^(#{2,3} .*)$", text, flags=re.M)
    return {head[4:].strip(): body for head, body in zip(parts[1::2], parts[2::2]) if head.startswith("### ")}


def missing_sections(pm: Any, text: str) -> list[str]:
    """The registered ops of ``pm`` that ``text`` (a page like docs/ops.md) lacks, or whose section does not
    open with the contract's exact signature: ``"<name>: <why>"`` each, empty when every op is documented."""
    found = sections(text)
    problems = []
    for _, c in contracts_by_plugin(pm):
        if c.name not in found:
            problems.append(f"{c.name}: no section")
        elif not found[c.name].strip().startswith(f"`{c.signature}`"):
            problems.append(f"{c.name}: the section does not open with `{c.signature}`")
    return problems


def main(argv: list[str] | None = None) -> int:
    from anna_core.plugins import make_plugin_manager

    parser = argparse.ArgumentParser(prog="python -m anna_core.kernels.op_docs", description=__doc__.split("\n")[0])
    parser.add_argument("--write", type=Path, default=None, help="write the page here instead of printing it")
    args = parser.parse_args(argv)
    text = render(make_plugin_manager())
    if args.write is None:
        sys.stdout.write(text)
    else:
        args.write.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
