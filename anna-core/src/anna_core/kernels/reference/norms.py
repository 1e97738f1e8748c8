"""RMS normalisation (Zhang & Sennrich, "Root Mean Square Layer Normalization", 2019), its
SiLU-gated variant (the Gated DeltaNet output norm of Qwen3.5, FLA ``FusedRMSNormGated``) and the
fused compositions decoders run (residual adds, sandwich-norm tails, two norms of one input).

All compute in float32 and return x's dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from anna_core.kernels.checks import require


def _normalise(x: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.to(torch.float32)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def _check_weight(op: str, x: torch.Tensor, weight: torch.Tensor) -> None:
    if x.dim() >= 1 and weight.dim() == 1 and weight.shape[0] == x.shape[-1]:
        return  # the message below is built only on failure (decode calls this per norm)
    require(x.dim() >= 1, op, "x must have at least one dimension")
    require(weight.dim() == 1 and weight.shape[0] == x.shape[-1], op,
            f"weight must be [D={x.shape[-1]}], got {tuple(weight.shape)}")


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, zero_centered: bool) -> torch.Tensor:
    """``x / sqrt(mean(x^2) + eps) * w`` with ``w = 1 + weight`` if ``zero_centered`` else ``weight``.

    Args:
        x: ``[..., D]``; weight: ``[D]``; eps: added to the mean square.
        zero_centered: weight stored as an offset from 1 (Qwen3.5, Gemma).

    Returns:
        ``[..., D]`` in x's dtype (the weight product is taken in float32 before rounding).

    Raises:
        ValueError: weight is not ``[D]``.
    """
    _check_weight("rms_norm", x, weight)
    if x.dtype == torch.float32 and weight.dtype == torch.float32 and not zero_centered:
        return F.rms_norm(x, (x.shape[-1],), weight, eps)  # the same math, fewer dispatched ops
    w = weight.to(torch.float32)
    if zero_centered:
        w = w + 1.0
    return (_normalise(x, eps) * w).to(x.dtype)


def gated_rms_norm(x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``rms_norm(x) * weight * silu(z)``, all in float32.

    Args:
        x, z: ``[..., D]`` (z is the gate); weight: ``[D]``; eps: added to the mean square.

    Returns:
        ``[..., D]`` in x's dtype.

    Raises:
        ValueError: weight is not ``[D]`` or z's shape differs from x's.
    """
    _check_weight("gated_rms_norm", x, weight)
    require(z.shape == x.shape, "gated_rms_norm", f"z must match x's shape {tuple(x.shape)}, got {tuple(z.shape)}")
    y = _normalise(x, eps) * weight.to(torch.float32) * F.silu(z.to(torch.float32))
    return y.to(x.dtype)


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float,
                 zero_centered: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Residual add fused with the next RMSNorm: ``r = x + residual``, ``y = rms_norm(r)``.

    The sum is rounded to x's dtype (exactly ``x + residual`` in torch) before it is normalised, as in
    a pre-norm decoder that adds the block output to the residual stream and then normalises it.

    Args:
        x: ``[T, D]`` (the previous block's output); residual: ``[T, D]``, x's dtype, or None (the
            first layer: no add, ``r = x``); weight: ``[D]``; eps, zero_centered: as :func:`rms_norm`.

    Returns:
        ``(y, r)``: the normalised sum and the new residual stream, both ``[T, D]`` in x's dtype.
        Fresh tensors (the inputs are not written), except ``r`` is ``x`` itself when residual is None.

    Raises:
        ValueError: weight is not ``[D]``; residual's shape or dtype differs from x's.
    """
    _check_weight("add_rms_norm", x, weight)
    if residual is not None:
        require(residual.shape == x.shape, "add_rms_norm",
                f"residual must match x's shape {tuple(x.shape)}, got {tuple(residual.shape)}")
        require(residual.dtype == x.dtype, "add_rms_norm",
                f"residual must have x's dtype {x.dtype}, got {residual.dtype}")
        x = x + residual
    return rms_norm(x, weight, eps, zero_centered), x


def post_norm_residual(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                       zero_centered: bool, scale: torch.Tensor | None,
                       next_weight: torch.Tensor | None) -> tuple[torch.Tensor | None, torch.Tensor]:
    """A sandwich-normed block's output norm and residual add, the optional layer scale, and the next
    block's input norm: ``r = residual + rms_norm(x, weight)``; ``r = r * scale`` (if given);
    ``y = rms_norm(r, next_weight)`` (if given).

    Args:
        x: ``[T, D]`` the block's output; residual: ``[T, D]`` of x's dtype; weight, next_weight: ``[D]``
            (next_weight may be None); eps, zero_centered: as :func:`rms_norm` (both norms);
            scale: ``[1]`` of x's dtype, or None.

    Returns:
        ``(y, r)`` ``[T, D]`` in x's dtype (``y`` None without next_weight), each step rounded as the
        torch expression ``(residual + rms_norm(x)) * scale`` rounds it.

    Raises:
        ValueError: a weight is not ``[D]``; residual's shape or dtype differs from x's; scale is not
            one element of x's dtype.
    """
    _check_weight("post_norm_residual", x, weight)
    require(residual.shape == x.shape and residual.dtype == x.dtype, "post_norm_residual",
            f"residual must match x's shape {tuple(x.shape)} and dtype {x.dtype}, got {tuple(residual.shape)} "
            f"{residual.dtype}")
    require(scale is None or (scale.numel() == 1 and scale.dtype == x.dtype), "post_norm_residual",
            f"scale must hold one element of x's dtype {x.dtype}")
    r = residual + rms_norm(x, weight, eps, zero_centered)
    if scale is not None:
        r = r * scale
    if next_weight is None:
        return None, r
    _check_weight("post_norm_residual", r, next_weight)
    return rms_norm(r, next_weight, eps, zero_centered), r


def rms_norm_pair(x: torch.Tensor, weight: torch.Tensor, eps: float, zero_centered: bool,
                  scale_weight: torch.Tensor, factor: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Two norms of the same rows: ``y = rms_norm(x, weight, eps, zero_centered)`` and ``s`` = the
    weightless norm of x times ``scale_weight`` times ``factor``, rounded to x's dtype after the norm and
    after each product, as torch rounds ``rms_norm(x, ones) * scale_weight * factor`` with a
    ``scale_weight`` of x's dtype (transformers' ``Gemma4TextRouter`` input beside the experts' input
    norm ``pre_feedforward_layernorm_2``). In float32 the roundings vanish and ``s`` is that expression's
    float32 value.

    Args:
        x: ``[..., D]``; weight, scale_weight: ``[D]``; eps: both norms'; zero_centered: ``y``'s weight
            (``s`` has no norm weight); factor: a Python float (``hidden ** -0.5``).

    Returns:
        ``(y, s)`` ``[..., D]`` each, in x's dtype.

    Raises:
        ValueError: a weight is not ``[D]``.
    """
    _check_weight("rms_norm_pair", x, weight)
    _check_weight("rms_norm_pair", x, scale_weight)
    dtype = x.dtype
    s = _normalise(x, eps).to(dtype).to(torch.float32) * scale_weight.to(torch.float32)
    s = (s.to(dtype).to(torch.float32) * float(factor)).to(dtype)
    return rms_norm(x, weight, eps, zero_centered), s


def dual_post_norm_residual(x1: torch.Tensor, weight_1: torch.Tensor, x2: torch.Tensor, weight_2: torch.Tensor,
                            residual: torch.Tensor, weight: torch.Tensor, eps: float, zero_centered: bool,
                            scale: torch.Tensor | None,
                            next_weight: torch.Tensor | None) -> tuple[torch.Tensor | None, torch.Tensor]:
    """:func:`post_norm_residual` of the sum of two normalised block outputs:
    ``x = rms_norm(x1, weight_1) + rms_norm(x2, weight_2)`` (each norm and the sum rounded to x1's dtype),
    then ``post_norm_residual(x, residual, weight, eps, zero_centered, scale, next_weight)`` (Gemma 4's
    MoE layer tail: ``post_ff_norm(post_ff_norm_1(mlp) + post_ff_norm_2(moe))``, the residual add, the
    layer scalar and the next layer's input norm).

    Args:
        x1, x2: ``[T, D]`` of one dtype; residual: ``[T, D]`` of that dtype; weight_1, weight_2, weight,
            next_weight: ``[D]`` (next_weight may be None); eps, zero_centered: every norm's;
            scale: ``[1]`` of x1's dtype, or None.

    Returns:
        ``(y, r)`` ``[T, D]`` in x1's dtype (``y`` None without next_weight); fresh tensors.

    Raises:
        ValueError: a weight is not ``[D]``; x2's or residual's shape or dtype differs from x1's; scale is
            not one element of x1's dtype.
    """
    _check_weight("dual_post_norm_residual", x1, weight_1)
    _check_weight("dual_post_norm_residual", x1, weight_2)
    for name, t in (("x2", x2), ("residual", residual)):
        require(t.shape == x1.shape and t.dtype == x1.dtype, "dual_post_norm_residual",
                f"{name} must match x1's shape {tuple(x1.shape)} and dtype {x1.dtype}, got {tuple(t.shape)} {t.dtype}")
    x = rms_norm(x1, weight_1, eps, zero_centered) + rms_norm(x2, weight_2, eps, zero_centered)
    return post_norm_residual(x, residual, weight, eps, zero_centered, scale, next_weight)


def post_norm_residual_norm_pair(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                                 zero_centered: bool, next_weight: torch.Tensor, pair_weight: torch.Tensor,
                                 scale_weight: torch.Tensor,
                                 factor: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`post_norm_residual` (no scale) whose new residual also goes through :func:`rms_norm_pair`:
    ``(y, r) = post_norm_residual(x, residual, weight, eps, zero_centered, None, next_weight)``, then
    ``(y2, s) = rms_norm_pair(r, pair_weight, eps, zero_centered, scale_weight, factor)`` (Gemma 4's MoE
    layer after its attention: the stream, the MLP's, the experts' and the router's inputs).

    Args:
        x, residual: ``[T, D]`` of one dtype; weight, next_weight, pair_weight, scale_weight: ``[D]``
            (scale_weight of x's dtype); eps, zero_centered: every norm's; factor: a Python float.

    Returns:
        ``(y, y2, s, r)`` ``[T, D]`` each in x's dtype; fresh tensors.

    Raises:
        ValueError: as :func:`post_norm_residual` and :func:`rms_norm_pair`.
    """
    y, r = post_norm_residual(x, residual, weight, eps, zero_centered, None, next_weight)
    y2, s = rms_norm_pair(r, pair_weight, eps, zero_centered, scale_weight, factor)
    return y, y2, s, r


def check_per_layer_inputs(projected: torch.Tensor, ids: torch.Tensor, table: torch.Tensor, table_scale: float,
                           weight: torch.Tensor, eps: float, zero_centered: bool, projected_scale: float,
                           out_scale: float) -> None:
    """Check the arguments of :func:`per_layer_inputs` (shapes and dtypes only, no sync).

    Raises:
        ValueError: ``"per_layer_inputs: ..."`` unless weight is ``[P]``, projected ``[T, L*P]`` (a multiple of P
            wide), ids ``[T]`` of an integer dtype and table ``[V, L*P]`` of projected's dtype.
    """
    op = "per_layer_inputs"
    require(weight.dim() == 1 and weight.shape[0] > 0, op, f"weight must be [P], got {tuple(weight.shape)}")
    p = weight.shape[0]
    require(projected.dim() == 2 and projected.shape[1] % p == 0, op,
            f"projected must be [T, L*P] with P={p}, got {tuple(projected.shape)}")
    require(ids.dim() == 1 and ids.shape[0] == projected.shape[0] and not ids.is_floating_point(), op,
            f"ids must be [T={projected.shape[0]}] integers, got {tuple(ids.shape)} {ids.dtype}")
    require(table.dim() == 2 and table.shape[1] == projected.shape[1] and table.dtype == projected.dtype, op,
            f"table must be [V, {projected.shape[1]}] of projected's dtype {projected.dtype}, got "
            f"{tuple(table.shape)} {table.dtype}")


def per_layer_inputs(projected: torch.Tensor, ids: torch.Tensor, table: torch.Tensor, table_scale: float,
                     weight: torch.Tensor, eps: float, zero_centered: bool, projected_scale: float,
                     out_scale: float) -> torch.Tensor:
    """Gemma 4's per-layer inputs (transformers' ``Gemma4TextModel.project_per_layer_inputs`` on the table rows of
    ``get_per_layer_inputs``): ``(rms_norm(projected * projected_scale) + table[ids] * table_scale) * out_scale``
    per group of ``P`` values.

    Args:
        projected: ``[T, L*P]``; ids: ``[T]`` integer token ids; table: ``[V, L*P]`` of projected's dtype;
            table_scale: the table rows' scale (``sqrt(P)`` rounded to the table's dtype, as transformers rounds it);
            weight: ``[P]``; eps, zero_centered: the norm's; projected_scale: ``hidden ** -0.5``;
            out_scale: ``2 ** -0.5``.

    Returns:
        ``[T, L, P]`` in projected's dtype, each product, the norm and the sum rounded to it.

    Raises:
        ValueError: see :func:`check_per_layer_inputs`.
    """
    check_per_layer_inputs(projected, ids, table, table_scale, weight, eps, zero_centered, projected_scale, out_scale)
    t, p = projected.shape[0], weight.shape[0]
    rows = F.embedding(ids, table) * table_scale
    normed = rms_norm((projected * projected_scale).view(t, -1, p), weight, eps, zero_centered)
    return (normed + rows.view(t, -1, p)) * out_scale
