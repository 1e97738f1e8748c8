"""The kernel conformance suite (see :mod:`anna_core.testing.conformance`)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
import torch

from anna_core.testing.conformance.compare import compare_results

KERNEL_TOLERANCES: dict[str, float] = {"float32": 1e-4, "float16": 2e-3, "bfloat16": 2e-2}
"""Default bound of :func:`relative_error` between an implementation and the reference, per activation dtype
(float32: summation order only; bfloat16: a rounding at one ulp, e.g. Triton's interpreter rounds float32 ->
bfloat16 toward zero, and attention probabilities rounded to bfloat16 before ``P @ V``)."""


def _plugin_manager(plugin: Any) -> tuple[Any, Any]:
    """``(pm, the plugin's object in it)``: every installed plugin (so the ops of family plugins are known), with
    ``plugin`` (an entry-point name, or a plugin object: a module or instance holding hookimpls) registered."""
    from anna_core.plugins import make_plugin_manager

    pm = make_plugin_manager()
    if isinstance(plugin, str):
        target = pm.get_plugin(plugin)
        if target is None:
            names = sorted(name for name, _ in pm.list_name_plugin())
            raise LookupError(f"no installed anna plugin is named {plugin!r} (installed: {names})")
        return pm, target
    if not pm.is_registered(plugin):
        pm.register(plugin, name=getattr(plugin, "__name__", None) or f"conformance-{id(plugin)}")
    return pm, plugin


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _clone_result(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (tuple, list)):
        return type(value)(_clone_result(v) for v in value)
    return value


class KernelConformance:
    """Base class of a kernel plugin's conformance tests: every implementation it registers against the op's
    torch reference, on the op's sample inputs (``OpContract.examples``) its probe accepts.

    A kernel plugin runs it from its own tests with one subclass::

        from anna_core.testing.conformance import KernelConformance

        class TestMyKernelsConformance(KernelConformance):
            plugin = "my_kernels"          # the entry-point name (or the plugin object itself)
            device = "cuda"

    pytest makes one test per (implementation, dtype), ``test_implementation_matches_reference[rms_norm:triton-
    float32]``: for every example of the op it asks the implementation's probe about ``(device, dtype,
    example.shape)`` and, where it accepts, runs the implementation and the reference on equal fresh inputs
    (each from its own call of the deterministic examples builder) and compares the results and every tensor
    argument afterwards (so what an op writes in place, state pools and caches, is compared too, and an input
    it must not write is caught). An implementation whose probe declines every example on this device and
    dtype, or that declares other devices (``KernelSpec.devices``), is skipped, with the reason.
    ``test_registers_checkable_implementations`` fails when the plugin registers none, or one of an op whose
    contract declares no examples.

    Class attributes a subclass sets:
        plugin: entry-point name of the plugin (``[project.entry-points.anna]``) or a plugin object (a module
            or instance holding ``@hookimpl`` functions; registered for the suite). Required.
        device: the device type to run on (default ``"cpu"``).
        dtypes: activation dtypes to run (default ``("float32", "bfloat16")``).
        tolerances: ``{dtype: bound}`` of :func:`relative_error` (default :data:`KERNEL_TOLERANCES`).
        op_tolerances: ``{op: {dtype: bound}}`` overriding ``tolerances`` for some ops.
        environment: environment variables set while the plugin registers its kernels and while the probes and
            implementations run (e.g. a switch that lets them run under an interpreter on the CPU).
    """

    plugin: ClassVar[Any] = ""
    device: ClassVar[str] = "cpu"
    dtypes: ClassVar[tuple[str, ...]] = ("float32", "bfloat16")
    tolerances: ClassVar[dict[str, float]] = KERNEL_TOLERANCES
    op_tolerances: ClassVar[dict[str, dict[str, float]]] = {}
    environment: ClassVar[dict[str, str]] = {}

    # -- what the plugin registers ---------------------------------------------------------------

    @classmethod
    def plugin_kernels(cls) -> tuple[dict[str, Any], list[Any]]:
        """``({op: contract}, [the plugin's KernelSpec, ...])``: every registered op contract (the plugin's own
        and every installed plugin's) and the implementations this plugin registers."""
        from anna_core.plugins import op_contracts

        if not cls.plugin:
            raise TypeError(f"{cls.__name__} must set the class attribute `plugin`")
        with _environment(cls.environment):  # a plugin may register by it (e.g. the devices it declares)
            pm, target = _plugin_manager(cls.plugin)
            others = [p for p in pm.get_plugins() if p is not target]
            specs: list[Any] = []
            pm.subset_hook_caller("register_kernels", remove_plugins=others)(register=specs.append)
            return {c.name: c for c in op_contracts(pm)}, specs

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "kernel_case" not in metafunc.fixturenames:
            return
        _, specs = self.plugin_kernels()
        cases = [(spec, dtype) for spec in specs for dtype in self.dtypes]
        metafunc.parametrize("kernel_case", cases, ids=[f"{s.op}:{s.name}-{d}" for s, d in cases])

    @pytest.fixture(autouse=True)
    def conformance_environment(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for name, value in self.environment.items():
            monkeypatch.setenv(name, value)

    def bound(self, op: str, dtype: str) -> float:
        """The :func:`relative_error` bound of ``op`` at ``dtype``."""
        return self.op_tolerances.get(op, {}).get(dtype, self.tolerances[dtype])

    # -- the check -------------------------------------------------------------------------------

    def check_implementation(self, spec: Any, contract: Any, dtype: str) -> int:
        """Run ``spec`` (a ``KernelSpec``) and ``contract``'s reference on every example its probe accepts at
        ``(self.device, dtype)``; return how many ran.

        Raises:
            AssertionError: a result or an argument written in place differs from the reference's beyond
                :meth:`bound`, or the implementation raised on an example its probe accepted.
        """
        from anna_core.kernels.registry import ProbeRequest
        from anna_core.registry import resolve

        build = resolve(contract.examples)
        probe = resolve(spec.probe) if spec.probe else None
        reference, impl = resolve(contract.reference), resolve(spec.impl)
        ran = 0
        if not spec.serves(self.device):
            return ran
        torch_dtype = getattr(torch, dtype)
        for i, example in enumerate(build(self.device, torch_dtype)):
            if probe is not None and not probe(ProbeRequest(self.device, dtype, dict(example.shape))):
                continue
            where = f"{spec.op}:{spec.name} {self.device}/{dtype} example {i} (shape facts {example.shape})"
            want_args = build(self.device, torch_dtype)[i]
            want = _clone_result(reference(*want_args.args, **want_args.kwargs))
            try:
                got = _clone_result(impl(*example.args, **example.kwargs))
            except Exception as exc:  # noqa: BLE001 -- an accepted example must run
                raise AssertionError(f"{where}: raised {type(exc).__name__}: {exc}") from exc
            bound = self.bound(spec.op, dtype)
            compare_results(f"{where}: result", got, want, bound)
            names = contract.parameters
            compare_written = resolve(contract.compare) if contract.compare else None
            for j, (g, w) in enumerate(zip(example.args, want_args.args)):
                if isinstance(w, torch.Tensor):
                    name = names[j] if j < len(names) else f"argument {j}"
                    if compare_written is None:
                        compare_results(f"{where}: {name} after the call", g, w, bound)
                    else:
                        compare_written(f"{where}: {name} after the call", name, g, w, want_args.args, bound)
            ran += 1
        return ran

    # -- the suite -------------------------------------------------------------------------------

    def test_registers_checkable_implementations(self) -> None:
        contracts, specs = self.plugin_kernels()
        assert specs, f"plugin {self.plugin!r} registers no kernel implementations (register_kernels)"
        bare = sorted({s.op for s in specs if contracts[s.op].examples is None})
        assert not bare, (f"ops without sample inputs (OpContract.examples), so their implementations cannot be "
                          f"checked: {bare}")
        for op in sorted({s.op for s in specs}):
            contract = contracts[op]
            from anna_core.registry import resolve

            first, second = (resolve(contract.examples)(self.device, getattr(torch, self.dtypes[0])) for _ in range(2))
            assert first, f"op {op!r}: its examples builder returned no examples"
            for a, b in zip(first, second):
                unknown = sorted(set(a.shape) - set(contract.shape_facts))
                assert not unknown, f"op {op!r}: example shape facts {unknown} are not among its shape_facts"
                compare_results(f"op {op!r}: examples built twice", list(a.args), list(b.args), 0.0)

    def test_implementation_matches_reference(self, kernel_case: tuple[Any, str]) -> None:
        spec, dtype = kernel_case
        contracts, _ = self.plugin_kernels()
        if contracts[spec.op].examples is None:
            pytest.fail(f"op {spec.op!r} declares no examples (OpContract.examples)")
        if not spec.serves(self.device):
            pytest.skip(f"{spec.op}:{spec.name} runs on {', '.join(spec.devices or ())}, not {self.device}")
        if not self.check_implementation(spec, contracts[spec.op], dtype):
            pytest.skip(f"{spec.op}:{spec.name}'s probe declines every example on {self.device}/{dtype}")
