"""Every op of the contract resolves to its reference implementation through the kernel registry."""

import inspect

import torch
from anna_core.kernels import KernelRegistry, bind_ops
from anna_core.kernels.ops import CORE_OPS, OPS
from anna_core.registry import resolve


def test_every_op_resolves_to_a_reference_function_with_the_contract_signature():
    assert len(OPS) == len(CORE_OPS) == 45
    for contract in CORE_OPS:
        fn = resolve(contract.reference)
        assert callable(fn) and fn.__name__ == contract.name
        assert list(inspect.signature(fn).parameters) == contract.parameters, contract.name
        if contract.check is not None:
            assert list(inspect.signature(resolve(contract.check)).parameters) == contract.parameters


def test_op_table_calls_reference_rms_norm():
    registry = KernelRegistry(CORE_OPS)
    ops = bind_ops(registry, torch.device("cpu"), torch.float32)
    x = torch.tensor([[3.0, 4.0]])
    y = ops.rms_norm(x, torch.tensor([1.0, 2.0]), 0.0, False)
    rms = (12.5) ** 0.5
    torch.testing.assert_close(y, torch.tensor([[3.0 / rms, 8.0 / rms]]))
    assert registry.chosen() == {"rms_norm": "reference"}
