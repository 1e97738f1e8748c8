"""Small ops fused into the linear layer next to them (the decode prologue and epilogue fusions).

At batch 1 a decode step is bound by the number of kernel launches as much as by bytes: the norm
before a projection and the SwiGLU product between the gate/up and down projections are tiny
kernels. Kernel plugins may compute these in the GEMV's prologue or epilogue (one launch); the
references here compose the unfused references, so a fused kernel is checked against exactly the
numerics of the unfused path:

    add_rms_norm_linear:          (h, r) = add_rms_norm(x, residual);  y = linear(h, weight)
    act_mul_linear:               y = linear(act_and_mul(x, activation), weight)
    linear_act_mul:               y = act_and_mul(linear(x, weight), activation)
    add_rms_norm_linear_act_mul:  (h, r) = add_rms_norm(x, residual);  y = linear_act_mul(h, weight, activation)
    post_norm_residual_linear:    (h, r) = post_norm_residual(x, residual, ...);  y = linear(h or r, weight)
                                  (or linear_act_mul with an activation)

with every intermediate rounded to x's dtype as the unfused ops round it; ``activation`` is ``"silu"``
(SwiGLU) or ``"gelu_tanh"`` (GeGLU, :func:`~anna_core.kernels.reference.activations.act_and_mul`).
"""

from __future__ import annotations

import torch

from anna_core.kernels.checks import check_gated_activation, require
from anna_core.kernels.reference.activations import act_and_mul
from anna_core.kernels.reference.linear import check_linear, linear
from anna_core.kernels.reference.norms import add_rms_norm, post_norm_residual


def check_add_rms_norm_linear(x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor,
                              weight: torch.Tensor, op: str = "add_rms_norm_linear") -> None:
    """Check the arguments of :func:`add_rms_norm_linear` (shapes and dtypes only, no sync).

    Raises:
        ValueError: ``"<op>: ..."`` when any documented shape or dtype does not hold.
    """
    check_linear(op, x, weight, None)
    k = weight.shape[1]
    require(norm_weight.dim() == 1 and norm_weight.shape[0] == k, op,
            f"norm_weight must be [K={k}], got {tuple(norm_weight.shape)}")
    if residual is not None:
        require(residual.shape == x.shape, op, f"residual must match x's shape {tuple(x.shape)}, "
                f"got {tuple(residual.shape)}")
        require(residual.dtype == x.dtype, op, f"residual must have x's dtype {x.dtype}, got {residual.dtype}")


def check_act_mul_linear(x: torch.Tensor, weight: torch.Tensor, activation: str = "silu") -> None:
    """Check the arguments of :func:`act_mul_linear` (shapes and dtypes only, no sync).

    Raises:
        ValueError: ``"act_mul_linear: ..."`` unless weight is ``[N, K]``, x ``[..., 2K]`` of its dtype
            and activation one of :data:`~anna_core.kernels.checks.GATED_ACTIVATIONS`.
    """
    op = "act_mul_linear"
    check_gated_activation(op, activation)
    require(weight.dim() == 2, op, f"weight must be [N, K], got shape {tuple(weight.shape)}")
    k = weight.shape[1]
    require(x.dim() >= 1 and x.shape[-1] == 2 * k, op,
            f"x must be [M, 2K={2 * k}] (gate, then up), got shape {tuple(x.shape)}")
    require(x.dtype == weight.dtype, op, f"x ({x.dtype}) and weight ({weight.dtype}) must share one dtype")


def check_linear_act_mul(x: torch.Tensor, weight: torch.Tensor, activation: str = "silu") -> None:
    """Check the arguments of :func:`linear_act_mul` (shapes and dtypes only, no sync).

    Raises:
        ValueError: ``"linear_act_mul: ..."`` unless weight is ``[2I, K]`` (even row count), x
            ``[..., K]`` of its dtype and activation one of :data:`~anna_core.kernels.checks.GATED_ACTIVATIONS`.
    """
    op = "linear_act_mul"
    check_gated_activation(op, activation)
    check_linear(op, x, weight, None)
    require(weight.shape[0] % 2 == 0, op, f"weight must be [2I, K] (gate rows, then up rows), got {tuple(weight.shape)}")


def check_add_rms_norm_linear_act_mul(x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor,
                                      weight: torch.Tensor, activation: str = "silu") -> None:
    """Check the arguments of :func:`add_rms_norm_linear_act_mul` (shapes and dtypes only, no sync).

    Raises:
        ValueError: ``"add_rms_norm_linear_act_mul: ..."`` when a shape or dtype of
            :func:`check_add_rms_norm_linear` does not hold, weight's row count is odd or the
            activation is unknown.
    """
    op = "add_rms_norm_linear_act_mul"
    check_gated_activation(op, activation)
    check_add_rms_norm_linear(x, residual, norm_weight, weight, op)
    require(weight.shape[0] % 2 == 0, op, f"weight must be [2I, K] (gate rows, then up rows), got {tuple(weight.shape)}")


def add_rms_norm_linear(x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor, eps: float,
                        zero_centered: bool, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Residual add, RMSNorm, then a bias-free linear layer (a pre-norm block's input projection).

    Args:
        x: ``[M, K]`` (or ``[..., K]``) float activations: the previous block's output.
        residual: x's shape and dtype, or None (first layer: no add).
        norm_weight: ``[K]`` RMSNorm weight (any float dtype); eps: added to the mean square;
            zero_centered: the norm scales by ``1 + norm_weight`` (Qwen3.5).
        weight: ``[N, K]`` of x's dtype (``nn.Linear`` layout).

    Returns:
        ``(y, new_residual)``: ``new_residual = x + residual`` rounded to x's dtype (``x`` itself when
        residual is None), ``h = rms_norm(new_residual)`` rounded to x's dtype, ``y = h @ weight^T``
        ``[M, N]`` in x's dtype (:func:`~anna_core.kernels.reference.norms.add_rms_norm`, then
        :func:`~anna_core.kernels.reference.linear.linear`). The inputs are not written.

    Raises:
        ValueError: shapes or dtypes disagree (see :func:`check_add_rms_norm_linear`).
    """
    check_add_rms_norm_linear(x, residual, norm_weight, weight)
    h, new_residual = add_rms_norm(x, residual, norm_weight, eps, zero_centered)
    return linear(h, weight, None), new_residual


def act_mul_linear(x: torch.Tensor, weight: torch.Tensor, activation: str = "silu") -> torch.Tensor:
    """Gated product, then a bias-free linear layer (an MLP's ``down_proj`` after the merged gate/up).

    Args:
        x: ``[M, 2K]`` (or ``[..., 2K]``): gate values, then up values; weight: ``[N, K]`` of x's dtype.
        activation: ``"silu"`` (SwiGLU) or ``"gelu_tanh"`` (GeGLU).

    Returns:
        ``[M, N]`` in x's dtype: ``act_and_mul(x, activation) @ weight^T``, the intermediate rounded to x's
        dtype as :func:`~anna_core.kernels.reference.activations.act_and_mul` rounds it.

    Raises:
        ValueError: shapes, dtypes or the activation are wrong (see :func:`check_act_mul_linear`).
    """
    check_act_mul_linear(x, weight, activation)
    return linear(act_and_mul(x, activation), weight, None)


def linear_act_mul(x: torch.Tensor, weight: torch.Tensor, activation: str = "silu") -> torch.Tensor:
    """A merged gate/up projection followed by the gated product (an MLP's first half).

    Args:
        x: ``[M, K]`` (or ``[..., K]``) float activations; weight: ``[2I, K]`` of x's dtype, the gate
            projection's rows then the up projection's (as ``SwiGLUMLP.merge_gate_up`` stores them).
        activation: ``"silu"`` (SwiGLU) or ``"gelu_tanh"`` (GeGLU).

    Returns:
        ``[M, I]`` in x's dtype: ``act_and_mul(linear(x, weight, None), activation)``, the projection
        rounded to x's dtype first (:func:`~anna_core.kernels.reference.linear.linear`, then
        :func:`~anna_core.kernels.reference.activations.act_and_mul`).

    Raises:
        ValueError: shapes, dtypes or the activation are wrong (see :func:`check_linear_act_mul`).
    """
    check_linear_act_mul(x, weight, activation)
    return act_and_mul(linear(x, weight, None), activation)


def add_rms_norm_linear_act_mul(x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor,
                                eps: float, zero_centered: bool, weight: torch.Tensor,
                                activation: str = "silu") -> tuple[torch.Tensor, torch.Tensor]:
    """Residual add, RMSNorm, then a merged gate/up projection and the gated product (a pre-norm MLP's
    first half: its norm, gate/up projection and activation).

    Args:
        x: ``[M, K]`` (or ``[..., K]``) float activations: the previous block's output.
        residual: x's shape and dtype, or None (no add).
        norm_weight: ``[K]`` RMSNorm weight (any float dtype); eps: added to the mean square;
            zero_centered: the norm scales by ``1 + norm_weight`` (Qwen3.5).
        weight: ``[2I, K]`` of x's dtype, gate rows then up rows (as ``SwiGLUMLP.merge_gate_up`` stores them).
        activation: ``"silu"`` (SwiGLU) or ``"gelu_tanh"`` (GeGLU).

    Returns:
        ``(y, new_residual)``: ``(h, new_residual) = add_rms_norm(x, residual, ...)`` as in
        :func:`add_rms_norm_linear`, then ``y = linear_act_mul(h, weight, activation)`` ``[M, I]`` in x's
        dtype.
        The inputs are not written.

    Raises:
        ValueError: shapes or dtypes disagree (see :func:`check_add_rms_norm_linear_act_mul`).
    """
    check_add_rms_norm_linear_act_mul(x, residual, norm_weight, weight, activation)
    h, new_residual = add_rms_norm(x, residual, norm_weight, eps, zero_centered)
    return linear_act_mul(h, weight, activation), new_residual


def check_gated_linear(gate: torch.Tensor, up: torch.Tensor, weight: torch.Tensor, activation: str) -> None:
    """Check the arguments of :func:`gated_linear` (shapes and dtypes only, no sync).

    Raises:
        ValueError: ``"gated_linear: ..."`` unless weight is ``[N, K]``, gate and up one ``[..., K]`` shape
            of weight's dtype and activation one of :data:`~anna_core.kernels.checks.GATED_ACTIVATIONS`.
    """
    op = "gated_linear"
    check_gated_activation(op, activation)
    require(weight.dim() == 2, op, f"weight must be [N, K], got shape {tuple(weight.shape)}")
    k = weight.shape[1]
    require(gate.dim() >= 1 and gate.shape[-1] == k and up.shape == gate.shape, op,
            f"gate and up must be one [M, K={k}] shape, got {tuple(gate.shape)} and {tuple(up.shape)}")
    require(gate.dtype == up.dtype == weight.dtype, op,
            f"gate ({gate.dtype}), up ({up.dtype}) and weight ({weight.dtype}) must share one dtype")


def gated_linear(gate: torch.Tensor, up: torch.Tensor, weight: torch.Tensor, activation: str) -> torch.Tensor:
    """``act(gate) * up``, then a bias-free linear layer: :func:`act_mul_linear` with gate and up in two
    tensors (Gemma 4's per-layer-input block: ``per_layer_projection(gelu_tanh(gate) * per_layer_input)``).

    Args:
        gate, up: ``[M, K]`` (or ``[..., K]``; up may be a strided view); weight: ``[N, K]`` of their dtype.
        activation: ``"silu"`` or ``"gelu_tanh"``.

    Returns:
        ``[..., N]`` in gate's dtype, the product rounded as ``act_and_mul`` rounds it.

    Raises:
        ValueError: see :func:`check_gated_linear`.
    """
    check_gated_linear(gate, up, weight, activation)
    return linear(act_and_mul(torch.cat([gate, up], dim=-1), activation), weight, None)


def check_post_norm_residual_linear(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                                    zero_centered: bool, scale: torch.Tensor | None, next_weight: torch.Tensor | None,
                                    linear_weight: torch.Tensor, activation: str | None = None) -> None:
    """Check the arguments of :func:`post_norm_residual_linear` (shapes and dtypes only, no sync).

    Raises:
        ValueError: ``"post_norm_residual_linear: ..."`` unless linear_weight is ``[N, K]`` (``[2I, K]`` with an
            activation) of x's dtype, x and residual one ``[..., K]`` shape and dtype, weight and next_weight
            (or None) ``[K]``, scale None or one element of x's dtype, activation None or one of
            :data:`~anna_core.kernels.checks.GATED_ACTIVATIONS`.
    """
    op = "post_norm_residual_linear"
    check_linear(op, x, linear_weight, None)
    if activation is not None:
        check_gated_activation(op, activation)
        require(linear_weight.shape[0] % 2 == 0, op,
                f"linear_weight must be [2I, K] (gate rows, then up rows), got {tuple(linear_weight.shape)}")
    k = linear_weight.shape[1]
    require(weight is not None and weight.dim() == 1 and weight.shape[0] == k, op,
            f"weight must be [K={k}], got {None if weight is None else tuple(weight.shape)}")
    require(next_weight is None or (next_weight.dim() == 1 and next_weight.shape[0] == k), op,
            f"next_weight must be [K={k}] or None, got {None if next_weight is None else tuple(next_weight.shape)}")
    require(residual.shape == x.shape and residual.dtype == x.dtype, op,
            f"residual must match x's shape {tuple(x.shape)} and dtype {x.dtype}, got {tuple(residual.shape)} "
            f"{residual.dtype}")
    require(scale is None or (scale.numel() == 1 and scale.dtype == x.dtype), op,
            f"scale must hold one element of x's dtype {x.dtype}")


def post_norm_residual_linear(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                              zero_centered: bool, scale: torch.Tensor | None, next_weight: torch.Tensor | None,
                              linear_weight: torch.Tensor,
                              activation: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A sandwich-normed block's tail fused into the projection that reads its result (Gemma: the attention's
    post norm and residual add before the MLP's gate/up projection, the MLP's before the per-layer-input gate).

    Args:
        x: ``[M, K]`` (or ``[..., K]``) the block's output; residual: the stream, x's shape and dtype.
        weight: ``[K]`` the block's post norm; eps, zero_centered: both norms'; scale: ``[1]`` of x's dtype (a
            layer scalar) or None; next_weight: ``[K]`` the next block's input norm, or None.
        linear_weight: ``[N, K]`` of x's dtype, no bias (``[2I, K]``, gate rows then up rows, with an activation).
        activation: None (a plain projection), ``"silu"`` or ``"gelu_tanh"`` (the gated product of a merged
            gate/up projection, as :func:`linear_act_mul`).

    Returns:
        ``(y, new_residual)``: ``(h, new_residual) = post_norm_residual(x, residual, weight, eps, zero_centered,
        scale, next_weight)`` (``h = new_residual`` without next_weight), then ``y = linear(h, linear_weight)``
        ``[M, N]`` (``linear_act_mul(h, linear_weight, activation)`` ``[M, I]``), every intermediate rounded to
        x's dtype as those ops round it. The inputs are not written.

    Raises:
        ValueError: shapes or dtypes disagree (see :func:`check_post_norm_residual_linear`).
    """
    check_post_norm_residual_linear(x, residual, weight, eps, zero_centered, scale, next_weight, linear_weight,
                                    activation)
    h, new_residual = post_norm_residual(x, residual, weight, eps, zero_centered, scale, next_weight)
    h = new_residual if h is None else h
    y = linear(h, linear_weight, None) if activation is None else linear_act_mul(h, linear_weight, activation)
    return y, new_residual


def check_post_norm_residual_gated_linear(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                                          zero_centered: bool, scale: torch.Tensor | None, gate_weight: torch.Tensor,
                                          up: torch.Tensor, linear_weight: torch.Tensor, activation: str) -> None:
    """Check the arguments of :func:`post_norm_residual_gated_linear` (shapes and dtypes only, no sync).

    Raises:
        ValueError: ``"post_norm_residual_gated_linear: ..."`` unless the tail's arguments pass
            :func:`check_post_norm_residual_linear` (gate_weight ``[P, K]`` as its linear weight, no next norm), and
            up ``[..., P]`` with x's leading shape and linear_weight ``[N, P]`` pass :func:`check_gated_linear`.
    """
    op = "post_norm_residual_gated_linear"
    require(gate_weight.dim() == 2 and linear_weight.dim() == 2, op,
            f"gate_weight and linear_weight must be [P, K] and [N, P], got {tuple(gate_weight.shape)} and "
            f"{tuple(linear_weight.shape)}")
    require(up.shape[:-1] == x.shape[:-1], op, f"up must have x's rows {tuple(x.shape[:-1])}, got {tuple(up.shape)}")
    try:
        check_post_norm_residual_linear(x, residual, weight, eps, zero_centered, scale, None, gate_weight)
        gate = torch.empty((*x.shape[:-1], gate_weight.shape[0]), dtype=x.dtype, device="meta")
        check_gated_linear(gate, up, linear_weight, activation)  # (gate: a shape only)
    except ValueError as e:
        raise ValueError(f"{op}: {e}") from None


def post_norm_residual_gated_linear(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                                    zero_centered: bool, scale: torch.Tensor | None, gate_weight: torch.Tensor,
                                    up: torch.Tensor, linear_weight: torch.Tensor,
                                    activation: str) -> tuple[torch.Tensor, torch.Tensor]:
    """A sandwich-normed block's tail, then the small gated block that reads its result (Gemma 4's per-layer-input
    block: ``per_layer_projection(gelu_tanh(per_layer_input_gate(h')) * per_layer_input)`` after the MLP's tail
    ``h' = h + post_feedforward_layernorm(mlp)``).

    Args:
        x: ``[M, K]`` (or ``[..., K]``) the block's output; residual: the stream, x's shape and dtype.
        weight: ``[K]`` the block's post norm; eps, zero_centered: its; scale: ``[1]`` of x's dtype (a layer scalar)
            or None.
        gate_weight: ``[P, K]``; up: ``[..., P]`` (may be a strided view); linear_weight: ``[N, P]``; all of x's
            dtype, no biases. activation: ``"silu"`` or ``"gelu_tanh"``.

    Returns:
        ``(y, new_residual)``: ``(g, new_residual) = post_norm_residual_linear(x, residual, weight, eps,
        zero_centered, scale, None, gate_weight)``, then ``y = gated_linear(g, up, linear_weight, activation)``
        ``[..., N]``, every intermediate rounded to x's dtype as those ops round it. The inputs are not written.

    Raises:
        ValueError: see :func:`check_post_norm_residual_gated_linear`.
    """
    check_post_norm_residual_gated_linear(x, residual, weight, eps, zero_centered, scale, gate_weight, up,
                                          linear_weight, activation)
    gate, new_residual = post_norm_residual_linear(x, residual, weight, eps, zero_centered, scale, None, gate_weight)
    return gated_linear(gate, up, linear_weight, activation), new_residual
