"""The element-wise activation ops of anna-core: gated products of an MLP and of the attention output. Conventions:
:mod:`anna_core.kernels.ops`."""

from __future__ import annotations

from anna_core.kernels.contracts import OpContract
from anna_core.kernels.ops.declare import core_op

ACTIVATION_OPS: tuple[OpContract, ...] = (
    core_op(
        "silu_and_mul", "activations",
        signature="silu_and_mul(x) -> y",
        doc="""\
x: ``[..., 2I]`` (gate, then up: the merged gate/up projection); y: ``[..., I]`` =
``silu(gate) * up`` evaluated as torch does in x's dtype (SiLU in float32 rounded to x's dtype,
then the product in float32 rounded again).
""",
    ),
    core_op(
        "sigmoid_mul", "activations",
        signature="sigmoid_mul(x, gate) -> y",
        doc="""\
x, gate: ``[..., D]``, one dtype (gate may be a strided view with unit stride along D);
``y = x * sigmoid(gate)`` evaluated as torch does in x's dtype (the attention output gate).
""",
    ),
)
"""``silu_and_mul``, ``sigmoid_mul``."""
