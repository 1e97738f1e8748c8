"""Op contracts: what an op *is* (its name, one documented signature, its torch reference).

Every kernel op, core's own and any a plugin adds, is declared by one :class:`OpContract`,
registered through the ``register_ops`` hook (:mod:`anna_core.hookspecs`). The kernel registry
(:mod:`anna_core.kernels.registry`) knows exactly the ops whose contract is registered: it rejects
implementations (``register_kernels``) of an op without one, and registers each contract's
reference as that op's ``"reference"`` implementation at priority 0 (the fallback every probe
leaves). Nothing here imports torch: contracts hold lazy ``"module:attr"`` strings.
"""

from __future__ import annotations

import keyword
import re

import attrs

REFERENCE_NAME = "reference"
"""Implementation name of every contract's torch reference (on ``/healthz``; cannot be disabled)."""

_SIGNATURE = re.compile(r"^(\w+)\((.*)\) -> .+$", re.S)


def signature_parameters(signature: str) -> list[str]:
    """The parameter names of a contract signature ``"op(a, b, c=1) -> y"`` (``["a", "b", "c"]``).

    Raises:
        ValueError: the text does not look like ``name(params) -> result``.
    """
    match = _SIGNATURE.match(signature.strip())
    if match is None:
        raise ValueError(f"op signature {signature!r} must look like 'op(arg, ...) -> result'")
    params = [p.strip() for p in match.group(2).split(",") if p.strip()]
    return [p.split("=")[0].strip() for p in params]


RESERVED_NAMES = frozenset({"get", "accelerated", "registry", "device_type", "dtype"})
"""Names an op cannot take: the ``OpTable`` attributes they would be shadowed by."""


def _lazy(target: object) -> bool:
    module, sep, attr = target.partition(":") if isinstance(target, str) else ("", "", "")
    return bool(sep and module and attr)


def _check_contract(contract: OpContract) -> None:
    where = f"op contract {contract.name!r}"
    if not contract.name.isidentifier() or keyword.iskeyword(contract.name) or contract.name in RESERVED_NAMES:
        raise ValueError(f"{where}: the name must be a Python identifier, not a keyword nor one of "
                         f"{sorted(RESERVED_NAMES)} (OpTable attributes)")
    match = _SIGNATURE.match(contract.signature.strip())
    if match is None or match.group(1) != contract.name:
        raise ValueError(f"{where}: signature {contract.signature!r} must look like '{contract.name}(arg, ...) -> result'")
    params = contract.parameters
    if len(set(params)) != len(params):
        raise ValueError(f"{where}: signature {contract.signature!r} names a parameter twice")
    if not contract.doc.strip():
        raise ValueError(f"{where}: doc must document the arguments' shapes and dtypes and the result")
    if not _lazy(contract.reference):
        raise ValueError(f"{where}: reference {contract.reference!r} must be a lazy 'package.module:attr' string")
    if contract.check is not None and not _lazy(contract.check):
        raise ValueError(f"{where}: check {contract.check!r} must be a lazy 'package.module:attr' string")
    if contract.examples is not None and not _lazy(contract.examples):
        raise ValueError(f"{where}: examples {contract.examples!r} must be a lazy 'package.module:attr' string")
    if contract.compare is not None and not _lazy(contract.compare):
        raise ValueError(f"{where}: compare {contract.compare!r} must be a lazy 'package.module:attr' string")
    if isinstance(contract.shape_facts, str) or not all(isinstance(k, str) for k in contract.shape_facts):
        raise ValueError(f"{where}: shape_facts must be a tuple of key names, got {contract.shape_facts!r}")


@attrs.frozen
class OpContract:
    """One kernel op: the one signature every implementation of it follows.

    Attributes:
        name: the op name (a Python identifier): the ``OpTable`` attribute, the ``/healthz`` key and
            the ``OP`` of ``--disable-kernel OP:NAME``.
        signature: ``"name(arg, ...) -> result"``; parameter names as the reference spells them.
        doc: the contract proper: each argument's shape and dtype, the result, the math (rounding
            included) and what is written in place. Shown by ``anna kernels``-style tooling and checked
            non-empty by the test suite.
        reference: lazy ``"module:attr"`` of the pure-torch reference implementation (any device).
        check: lazy ``"module:attr"`` of ``check(<the op's arguments>) -> None`` raising
            ``ValueError("<op>: ...")`` for bad arguments (shapes and dtypes only, no device sync), for
            implementations to share; None when the reference checks inline.
        shape_facts: the ``ProbeRequest.shape`` keys callers pass when they look the op up (e.g.
            ``("head_k_dim", "head_v_dim")``): what probes may decide on.
        examples: lazy ``"module:attr"`` of ``examples(device, dtype) -> list[OpExample]`` (a device type
            such as ``"cpu"`` and a ``torch.dtype``, the activations' dtype): a few small,
            seeded sample inputs (the same on every call) covering the op's paths, on which the kernel
            conformance suite (:class:`anna_core.testing.conformance.KernelConformance`) compares every
            implementation with the reference; None when the op has none (the suite then fails for
            any implementation of it).
        compare: lazy ``"module:attr"`` of ``compare(where, name, got, want, args, bound) -> None`` (raising
            AssertionError) with which the conformance suite compares an argument the op writes in place, for ops
            whose written bytes may differ within the contract (quantized rows whose norms round in their last
            bit: compared as the values they decode to); None: :func:`anna_core.testing.conformance.compare
            .compare_results` (integer tensors exactly).

    Raises:
        ValueError: a name that is no identifier, a signature not of that name, an empty doc, or a
            lazy target without ``":"``.
    """

    name: str
    signature: str
    doc: str
    reference: str
    check: str | None = None
    shape_facts: tuple[str, ...] = ()
    examples: str | None = None
    compare: str | None = None

    def __attrs_post_init__(self) -> None:
        _check_contract(self)

    @property
    def parameters(self) -> list[str]:
        """The parameter names of :attr:`signature`."""
        return signature_parameters(self.signature)


@attrs.frozen
class OpExample:
    """One sample call of an op (what :attr:`OpContract.examples` returns a list of).

    Attributes:
        args: the positional arguments, in the contract's signature order (tensors on the requested
            device; the arguments written in place, e.g. state pools and caches, included).
        kwargs: keyword arguments (usually empty).
        shape: the ``ProbeRequest.shape`` facts a caller would look the op up with for these arguments
            (keys among the contract's ``shape_facts``): implementations are run only where their probe
            accepts them.
    """

    args: tuple = ()
    kwargs: dict = attrs.field(factory=dict)
    shape: dict = attrs.field(factory=dict)
