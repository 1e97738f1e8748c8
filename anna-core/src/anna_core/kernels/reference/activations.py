"""Gated activations: the gated MLP products (SwiGLU, GeGLU-tanh) and the attention output gate; the periodic
SnakeBeta activation of audio decoders (:func:`snake_beta`).

Both evaluate the eager torch expressions the HF models use, so a kernel that matches these matches
the oracle's rounding too: in a half-precision dtype the activation (SiLU or sigmoid, computed in
float32 by torch) is rounded to the activation dtype, then the product is computed in float32 and
rounded again.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from anna_core.kernels.checks import check_gated_activation, require


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` of the merged gate/up projection (SwiGLU; Shazeer, "GLU Variants Improve
    Transformer", 2020).

    Args:
        x: ``[..., 2I]``: the gate (first ``I`` values of the last dim), then the up projection.

    Returns:
        ``[..., I]`` in x's dtype, equal to ``F.silu(gate) * up`` evaluated in x's dtype.

    Raises:
        ValueError: x has no dimension or an odd last dimension.
    """
    require(x.dim() >= 1 and x.shape[-1] % 2 == 0, "silu_and_mul",
            f"x must be [..., 2I] with an even last dim, got shape {tuple(x.shape)}")
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up


def act_and_mul(x: torch.Tensor, activation: str) -> torch.Tensor:
    """``act(gate) * up`` of a merged gate/up projection, ``act`` chosen by name.

    Args:
        x: ``[..., 2I]``: the gate (first ``I`` values of the last dim), then the up projection.
        activation: ``"silu"`` (:func:`silu_and_mul`) or ``"gelu_tanh"`` (``F.gelu(gate,
            approximate="tanh") * up``: GeGLU, Gemma's MLP).

    Returns:
        ``[..., I]`` in x's dtype, evaluated as the eager torch expression (the activation computed in
        float32 and rounded to x's dtype, then the product rounded again).

    Raises:
        ValueError: an unknown activation, x without dimensions or with an odd last dimension.
    """
    check_gated_activation("act_and_mul", activation)
    if activation == "silu":
        return silu_and_mul(x)
    require(x.dim() >= 1 and x.shape[-1] % 2 == 0, "act_and_mul",
            f"x must be [..., 2I] with an even last dim, got shape {tuple(x.shape)}")
    gate, up = x.chunk(2, dim=-1)
    return F.gelu(gate, approximate="tanh") * up


def sigmoid_mul(x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """``x * sigmoid(gate)``: the output gate of Qwen3.5's full attention (applied before ``o_proj``).

    Args:
        x: ``[..., D]`` (e.g. the attention output ``[T, H, D]``).
        gate: x's shape and dtype; may be a strided view (Qwen3.5 passes ``q_gate[..., D:]``).

    Returns:
        ``[..., D]`` in x's dtype, equal to ``x * torch.sigmoid(gate)``.

    Raises:
        ValueError: gate's shape or dtype differs from x's.
    """
    require(gate.shape == x.shape, "sigmoid_mul", f"gate must match x's shape {tuple(x.shape)}, got {tuple(gate.shape)}")
    require(gate.dtype == x.dtype, "sigmoid_mul", f"gate must have x's dtype {x.dtype}, got {gate.dtype}")
    return x * torch.sigmoid(gate)


def check_snake_beta(x: torch.Tensor, alpha: torch.Tensor, beta: torch.Tensor) -> None:
    """Check the arguments of :func:`snake_beta` (no sync).

    Raises:
        ValueError: ``"snake_beta: ..."``: x not a float ``[B, C, T]``, alpha or beta not ``[C]`` of x's dtype, or
            on another device.
    """
    require(x.dim() == 3 and x.is_floating_point(), "snake_beta",
            f"x must be a float [B, C, T] tensor, got {tuple(x.shape)} {x.dtype}")
    for name, p in (("alpha", alpha), ("beta", beta)):
        require(p.shape == (x.shape[1],) and p.dtype == x.dtype, "snake_beta",
                f"{name} must be a [C] = [{x.shape[1]}] tensor of x's dtype {x.dtype}, got {tuple(p.shape)} {p.dtype}")
        require(p.device == x.device, "snake_beta", f"{name} is on {p.device}, x on {x.device}")


def snake_beta(x: torch.Tensor, alpha: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """SnakeBeta per channel: ``x + sin(x * exp(alpha))^2 / (exp(beta) + 1e-9)`` (Ziyin et al. 2020; the
    parametrisation of BigVGAN and of the Qwen3-TTS codec's decoder).

    Args:
        x: ``[B, C, T]``, any layout (the Qwen3-TTS decoder's are time-major: channels-last).
        alpha, beta: ``[C]`` of x's dtype, the log-scale frequency and magnitude.

    Returns:
        ``[B, C, T]`` in x's dtype (and, where x is dense, its layout): the eager torch expression (``addcdiv`` of x
        and the squared sine), each op rounded to x's dtype.

    Raises:
        ValueError: see :func:`check_snake_beta`.
    """
    check_snake_beta(x, alpha, beta)
    a = torch.exp(alpha)[None, :, None]
    b = torch.exp(beta)[None, :, None]
    return torch.addcdiv(x, torch.sin(x * a).pow(2), b + 1e-9)
