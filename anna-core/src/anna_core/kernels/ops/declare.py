"""How anna-core declares one of its own ops: the contract's lazy targets follow from its name.

Each core op's torch reference is ``anna_core.kernels.reference.<module>:<op>``, its shared argument check
(where it has one) ``anna_core.kernels.reference.<module>:check_<op>`` and its sample inputs
``anna_core.kernels.examples:<op>``; :func:`core_op` spells those out, so an op table entry names only what
differs between ops.
"""

from __future__ import annotations

from anna_core.kernels.contracts import OpContract

REFERENCE_PACKAGE = "anna_core.kernels.reference"
"""The package of anna-core's torch references (one module per op family)."""

EXAMPLES_MODULE = "anna_core.kernels.examples"
"""The module of anna-core's sample inputs (one function per op)."""


def core_op(
    name: str,
    reference_module: str,
    *,
    signature: str,
    doc: str,
    checked: bool = False,
    shape_facts: tuple[str, ...] = (),
    compare: str | None = None,
) -> OpContract:
    """The :class:`OpContract` of anna-core's op ``name``.

    Args:
        name: the op name; also the attribute of its reference and of its examples.
        reference_module: the module of :data:`REFERENCE_PACKAGE` holding the reference (``"norms"``).
        signature, doc, shape_facts, compare: as :class:`OpContract` takes them.
        checked: the reference module has ``check_<name>``, the argument check implementations share.

    Raises:
        ValueError: as :class:`OpContract` raises for a malformed contract.
    """
    module = f"{REFERENCE_PACKAGE}.{reference_module}"
    return OpContract(
        name=name,
        signature=signature,
        doc=doc,
        reference=f"{module}:{name}",
        check=f"{module}:check_{name}" if checked else None,
        shape_facts=shape_facts,
        examples=f"{EXAMPLES_MODULE}:{name}",
        compare=compare,
    )
