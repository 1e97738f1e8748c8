"""The element-wise activation ops of anna-core: gated products of an MLP and of the attention output, and the
periodic activation of audio decoders. Conventions: :mod:`anna_core.kernels.ops`."""

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
    core_op(
        "snake_beta", "activations", checked=True,
        signature="snake_beta(x, alpha, beta) -> y",
        doc="""x: ``[B, C, T]``, any layout (a codec decoder's may be time-major: channels-last, strides
``(T * C, 1, C)``); alpha, beta: ``[C]`` log-scale frequency and magnitude (as audio codec checkpoints store them);
y: ``[B, C, T]`` in x's dtype and, where x is contiguous or time-major, its layout,
``x + sin(x * exp(alpha))^2 / (exp(beta) + 1e-9)`` per channel (SnakeBeta: Ziyin et al. 2020, "Neural Networks Fail
to Learn Periodic Functions and How to Fix It"; BigVGAN's parametrisation), alpha and beta of x's dtype, evaluated
as torch does in x's dtype (each op in float32 rounded to x's dtype; ``addcdiv`` rounds once): in a 16-bit dtype the
sine's argument is rounded first, so a kernel must round where the expression does.
""",
    ),
)
"""``silu_and_mul``, ``sigmoid_mul``, ``snake_beta``."""
