"""Kernel selection: explicit priority plus an availability probe, never registration order."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from anna_core.errors import KernelNotFoundError
from anna_core.kernels.contracts import REFERENCE_NAME, OpContract
from anna_core.registry import resolve

log = logging.getLogger("anna.kernels")
plugin_log = logging.getLogger("anna.plugins")  # at DEBUG: each choice, with what declined

REFERENCE_PRIORITY = 0


@attrs.frozen
class ProbeRequest:
    """What a caller asks a kernel for.

    Attributes:
        device_type: ``"cpu"``, ``"cuda"`` or ``"xpu"``.
        dtype: activation dtype as a string (``"bfloat16"``, ``"float16"``, ``"float32"``).
        shape: op-specific static shape facts (e.g. ``{"head_dim": 128}``); may be empty.
    """

    device_type: str
    dtype: str
    shape: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class KernelSpec:
    """One implementation of one op.

    Attributes:
        op: the name of a registered op contract (:class:`~anna_core.kernels.contracts.OpContract`).
        name: implementation name shown on ``/healthz`` (``"triton"``, ``"fla"``; ``"reference"`` is
            reserved for the contract's own reference).
        impl: lazy ``"module:attr"`` of the callable implementing the op's signature.
        priority: higher wins among implementations whose probe accepts.
        probe: lazy ``"module:attr"`` of ``probe(ProbeRequest) -> bool``; ``None`` accepts all.
        devices: the device types (``"cuda"``, ``"xpu"``, ``"cpu"``) the implementation runs on at all,
            declared so they can be listed without a device (``anna plugins``); the registry never asks the
            probe about another device type (it declines). ``None``: any device type, the probe decides.
    """

    op: str
    name: str
    impl: str
    priority: int
    probe: str | None = None
    devices: tuple[str, ...] | None = attrs.field(default=None, converter=lambda v: None if v is None else tuple(v))

    def serves(self, device_type: str) -> bool:
        """Whether ``device_type`` is among the declared :attr:`devices` (always, without a declaration)."""
        return self.devices is None or device_type in self.devices


class KernelRegistry:
    """Knows the registered ops (their contracts); chooses, caches and reports the implementation of each."""

    def __init__(self, contracts: Sequence[OpContract], specs: Sequence[KernelSpec] = (), disabled: Sequence[str] = ()):
        """Args:
            contracts: every registered op (:class:`~anna_core.kernels.contracts.OpContract`); each
                one's reference becomes the op's ``"reference"`` implementation at priority 0.
            specs: every registered (non-reference) implementation.
            disabled: implementations never to choose, each ``"op:name"`` (one op) or ``"name"``
                (that implementation of every op), e.g. ``"linear:triton"`` or ``"fla"``; the torch
                references cannot be disabled (they are the fallback).

        Raises:
            ValueError: two contracts for one op, an implementation of an op without a contract, named
                ``"reference"``, registered twice under one name or at a priority not above the
                reference's, or a ``disabled`` entry naming an unknown op, an unknown
                implementation or the reference.
        """
        self.contracts: dict[str, OpContract] = {}
        for contract in contracts:
            if contract.name in self.contracts:
                raise ValueError(f"op {contract.name!r} has two contracts: {self.contracts[contract.name]} and {contract}")
            self.contracts[contract.name] = contract
        known = sorted(self.contracts)
        unknown = sorted({s.op for s in specs} - set(known))
        if unknown:
            raise ValueError(f"kernel registrations for ops without a contract {unknown} (register the op with "
                             f"register_ops first); known ops: {known}")
        seen: set[tuple[str, str]] = set()
        for spec in specs:
            if (spec.op, spec.name) in seen:
                raise ValueError(f"two kernel registrations named {spec.name!r} for op {spec.op!r}")
            if spec.priority <= REFERENCE_PRIORITY:
                raise ValueError(f"kernel {spec.op}:{spec.name} has priority {spec.priority}: implementations rank "
                                 f"above the torch reference's {REFERENCE_PRIORITY}")
            seen.add((spec.op, spec.name))
        reserved = sorted({s.op for s in specs if s.name == REFERENCE_NAME})
        if reserved:
            raise ValueError(f"kernel registrations named {REFERENCE_NAME!r} for {reserved}: that name is the "
                             f"contract's torch reference")
        names = {s.name for s in specs}
        per_op: dict[str, set[str]] = {}
        for spec in specs:
            per_op.setdefault(spec.op, set()).add(spec.name)
        off: set[tuple[str | None, str]] = set()
        for entry in disabled:
            op, sep, name = entry.rpartition(":")
            if sep and op not in self.contracts:
                raise ValueError(f"cannot disable kernel {entry!r}: unknown op {op!r}; known ops: {known}")
            allowed = per_op.get(op, set()) if sep else names
            if name not in allowed:
                where = f"op {op!r}" if sep else "any op"
                raise ValueError(f"cannot disable kernel {entry!r}: no implementation {name!r} is registered for "
                                 f"{where} (disable one of {sorted(allowed)}; the torch 'reference' always stays)")
            off.add((op if sep else None, name))
        references = [KernelSpec(op=c.name, name=REFERENCE_NAME, impl=c.reference, priority=REFERENCE_PRIORITY)
                      for c in self.contracts.values()]
        self._specs: dict[str, list[KernelSpec]] = {}
        for spec in [*specs, *references]:
            if (spec.op, spec.name) in off or (None, spec.name) in off:
                continue
            self._specs.setdefault(spec.op, []).append(spec)
        for op_specs in self._specs.values():
            op_specs.sort(key=lambda s: -s.priority)
        self._declined: set[tuple[str, Any]] = set()
        self._chosen: dict[tuple[str, ProbeRequest | str], tuple[KernelSpec, Callable[..., Any]]] = {}

    @classmethod
    def from_plugins(cls, pm=None, disabled: Sequence[str] = ()) -> KernelRegistry:
        """The registry of every op contract (``register_ops``) and implementation (``register_kernels``)
        the plugin manager ``pm`` (default: the process-wide one) holds.

        Raises:
            ValueError: as the constructor.
        """
        from anna_core.plugins import kernel_specs, op_contracts

        return cls(op_contracts(pm), kernel_specs(pm), disabled)

    def implementations(self, op: str) -> list[str]:
        """Names of the enabled implementations of ``op``, highest priority first (the reference last).

        Raises:
            KeyError: ``op`` has no contract.
        """
        if op not in self.contracts:
            raise KeyError(op)
        return [spec.name for spec in self._specs.get(op, [])]

    def get(self, op: str, request: ProbeRequest) -> Callable[..., Any]:
        """The callable for ``op`` under ``request``: the highest-priority enabled implementation whose
        probe accepts it (the contract's reference accepts everything).

        Raises:
            KernelNotFoundError: ``op`` has no contract, or no implementation accepts the request.
        """
        key = (op, _freeze(request))
        hit = self._chosen.get(key)
        if hit is not None:
            return hit[1]
        if op not in self.contracts:
            raise KernelNotFoundError(f"no kernel op {op!r} is registered (register_ops); known ops: "
                                      f"{sorted(self.contracts)}")
        declined: list[str] = []
        for spec in self._specs.get(op, []):
            if not spec.serves(request.device_type):
                declined.append(f"{spec.name} (devices {', '.join(spec.devices or ())})")
                continue
            probe = resolve(spec.probe) if spec.probe else None
            try:
                ok = probe(request) if probe is not None else True
            except Exception as exc:  # a broken probe declines, and says why once
                log.warning("kernel probe %s/%s failed: %s", op, spec.name, exc)
                ok = False
            if ok:
                fn = resolve(spec.impl)
                self._chosen[key] = (spec, fn)
                log.info("kernel %s -> %s (priority %d) for %s/%s", op, spec.name, spec.priority,
                         request.device_type, request.dtype)
                plugin_log.debug("kernel choice %s for %s/%s shape=%s: %s (priority %d, %s); declined: %s", op,
                                 request.device_type, request.dtype, request.shape, spec.name, spec.priority,
                                 spec.impl, ", ".join(declined) or "none")
                return fn
            declined.append(f"{spec.name} (probe)")
        raise KernelNotFoundError(
            f"no implementation of kernel op {op!r} accepts device={request.device_type} "
            f"dtype={request.dtype} shape={request.shape}; registered: "
            f"{[s.name for s in self._specs.get(op, [])]}"
        )

    def get_accelerated(self, op: str, request: ProbeRequest) -> Callable[..., Any] | None:
        """:meth:`get`, or None where only the op's torch reference accepts ``request``: for a fused op whose
        caller can compose the unfused ops instead (each then chosen on its own, so disabling a fused
        kernel falls back to the fastest unfused ones, not to the fused op's reference). A declined
        request is remembered and not listed by :meth:`chosen`.

        Raises:
            KernelNotFoundError: ``op`` has no contract.
        """
        key = (op, _freeze(request))
        if key in self._declined:
            return None
        fn = self.get(op, request)
        if self._chosen[key][0].name == "reference":
            del self._chosen[key]
            self._declined.add(key)
            return None
        return fn

    def chosen(self) -> dict[str, str]:
        """``{op: implementation name}`` for every op chosen so far (for ``/healthz``)."""
        return {op: spec.name for (op, _), (spec, _) in sorted(self._chosen.items(), key=lambda kv: kv[0][0])}


def _freeze(request: ProbeRequest) -> Any:
    return (request.device_type, request.dtype, tuple(sorted(request.shape.items())))


class OpTable:
    """Kernel ops bound to one (device, dtype): ``ops.rms_norm(...)`` or ``ops.get(op, **shape)``.

    Models receive one at construction (no module globals) and call ops through it.
    """

    def __init__(self, registry: KernelRegistry, device_type: str, dtype: str):
        self.registry = registry
        self.device_type = device_type
        self.dtype = dtype

    def get(self, op: str, **shape: Any) -> Callable[..., Any]:
        """The chosen implementation of ``op`` for this device/dtype and static ``shape`` facts."""
        return self.registry.get(op, ProbeRequest(self.device_type, self.dtype, dict(shape)))

    def accelerated(self, op: str, **shape: Any) -> Callable[..., Any] | None:
        """The chosen implementation of ``op`` unless it is the op's torch reference (then None: the caller
        composes the unfused ops); see :meth:`KernelRegistry.get_accelerated`."""
        return self.registry.get_accelerated(op, ProbeRequest(self.device_type, self.dtype, dict(shape)))

    def __getattr__(self, op: str) -> Callable[..., Any]:
        if op.startswith("_") or op not in self.registry.contracts:
            raise AttributeError(op)
        fn = self.get(op)
        # the registry's choice for (device, dtype) without shape facts never changes: keep it as an attribute,
        # so later ``ops.<op>`` lookups (per layer per step) skip the probe key
        self.__dict__[op] = fn
        return fn


def bind_ops(registry: KernelRegistry, device: Any, dtype: Any) -> OpTable:
    """An :class:`OpTable` for ``device`` (``torch.device`` or str) and ``dtype`` (``torch.dtype`` or str)."""
    device_type = getattr(device, "type", None) or str(device).split(":")[0]
    dtype_name = str(dtype).replace("torch.", "")
    return OpTable(registry, device_type, dtype_name)


def chosen_kernels(model: Any) -> dict[str, str]:
    """``{op: implementation}`` chosen so far by the registries ``model``'s op tables are bound to
    (``model``: an ``nn.Module`` whose submodules hold an :class:`OpTable` as ``ops``)."""
    chosen: dict[str, str] = {}
    modules = model.modules() if hasattr(model, "modules") else [model]
    seen: set[int] = set()
    for module in modules:
        registry = getattr(getattr(module, "ops", None), "registry", None)
        if registry is not None and id(registry) not in seen:
            seen.add(id(registry))
            chosen.update(registry.chosen())
    return chosen
