"""The sampling ops of anna-core: a draw from a row of logits inside a captured step. Conventions:
:mod:`anna_core.kernels.ops`."""

from __future__ import annotations

from anna_core.kernels.contracts import OpContract
from anna_core.kernels.ops.declare import core_op

SAMPLING_OPS: tuple[OpContract, ...] = (
    core_op(
        "top_k_gumbel_sample", "sampling",
        signature="top_k_gumbel_sample(logits, noise, temperature, top_k) -> ids",
        doc="""\
logits: ``[M, V]`` float (unit stride along V, any row stride); noise: ``[M, V]`` float32 (unit stride along V), the
finite Gumbel term ``log(-log(u))``, ``u ~ U(0, 1)``; temperature: a positive Python float whose float32 reciprocal is
a normal float32; top_k: an int, 0 or ``>= V`` for no filter. ``scores = float32(logits) * r``, ``r = float32(1 /
float32(temperature))`` (how torch's CUDA kernels divide by a Python float, on every device), the ids whose score is
below the
``top_k``-th largest at ``-inf`` (ties with it kept), then ``ids = argmax(scores - noise, -1)`` ``[M]`` int64, the
first column among equal largest values: a draw from ``softmax`` of the filtered scores (the Gumbel-max trick) in
transformers' order (temperature, then top-k), without a host sync. One launch where a kernel serves it, instead
of the float conversion, division, top-k, comparison, fill, subtraction and argmax of the composition.
""",
        checked=True,
    ),
)
"""``top_k_gumbel_sample``."""
