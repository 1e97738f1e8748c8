"""Every op of the contract resolves to its reference implementation through the kernel registry."""

import torch
from anna_core.kernels import KernelRegistry, KernelSpec, bind_ops
from anna_core.kernels.ops import OPS
from anna_core.registry import resolve


def test_every_op_resolves_to_a_reference_function():
    for op, path in OPS.items():
        fn = resolve(path)
        assert callable(fn) and fn.__name__ == op


def test_op_table_calls_reference_rms_norm():
    registry = KernelRegistry([KernelSpec(op=op, name="reference", impl=path, priority=0) for op, path in OPS.items()])
    ops = bind_ops(registry, torch.device("cpu"), torch.float32)
    x = torch.tensor([[3.0, 4.0]])
    y = ops.rms_norm(x, torch.tensor([1.0, 2.0]), 0.0, False)
    rms = (12.5) ** 0.5
    torch.testing.assert_close(y, torch.tensor([[3.0 / rms, 8.0 / rms]]))
    assert registry.chosen() == {"rms_norm": "reference"}
