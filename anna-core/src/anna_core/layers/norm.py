"""RMS normalisation over the last dimension, through the ``rms_norm`` (and fused ``add_rms_norm``) kernel ops."""

from __future__ import annotations

import torch
from torch import nn

from anna_core.layers.wq_linear import WQLinear


class RMSNorm(nn.Module):
    """Root-mean-square norm (Zhang & Sennrich, 2019) with a learned per-channel scale.

    ``y = x / sqrt(mean(x^2) + eps) * w`` where ``w = 1 + weight`` when ``zero_centered``
    (Qwen3.5 / Gemma 3 style: the stored weight is an offset from one) and ``w = weight`` otherwise;
    without ``scale`` there is no weight (``w = 1``: Gemma 4's value norm and MoE router norm).
    Math runs in float32 inside the op; the result has ``x``'s dtype.

    Args:
        dim: size ``D`` of the normalised (last) dimension.
        eps: added to the mean square.
        ops: the model's :class:`anna_core.kernels.OpTable`.
        zero_centered: store ``weight`` as an offset from one (initialised to zeros).
        scale: hold a learned ``weight`` (False: none; the op gets a ones vector of x's dtype, made once
            per device and dtype, so a meta-built model has nothing to load for it).

    Parameters:
        weight: ``[D]`` (absent without ``scale``).
    """

    def __init__(self, dim: int, eps: float, ops, zero_centered: bool = False, scale: bool = True):
        super().__init__()
        self.dim = dim
        self.eps = float(eps)
        self.zero_centered = zero_centered
        self.scale = scale
        self.ops = ops
        if scale:
            self.weight = nn.Parameter(torch.zeros(dim) if zero_centered else torch.ones(dim))
        else:
            if zero_centered:
                raise ValueError("an RMSNorm without a scale cannot be zero-centred")
            self.register_parameter("weight", None)
        self._ones: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}

    def _weight(self, x: torch.Tensor) -> torch.Tensor:
        if self.weight is not None:
            return self.weight
        key = (x.device, x.dtype)
        ones = self._ones.get(key)
        if ones is None:
            ones = self._ones[key] = torch.ones(self.dim, device=x.device, dtype=x.dtype)
        return ones

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None, *, fuse_add: bool = False,
                post: tuple[torch.Tensor | None, RMSNorm | None] | None = None,
                summed: tuple[RMSNorm, torch.Tensor, RMSNorm] | None = None):
        """Normalise ``x``; with ``fuse_add``, first add it to the residual stream (one fused op).

        Args:
            x: ``[..., D]``.
            residual: ``[..., D]`` in x's dtype, or None (the first layer: the stream starts at x).
            fuse_add: return the pair below instead of ``y`` alone (the ``add_rms_norm`` op).
            post: ``(scale, next_norm)``: :meth:`post_add`'s op instead (call that method).
            summed: with ``post``, ``(x_norm, x2, x2_norm)``: :meth:`post_add_sum`'s op instead.

        Returns:
            ``y`` ``[..., D]`` (same dtype) without ``fuse_add``; with it ``(y, new_residual)`` where
            ``new_residual = x + residual`` (x when residual is None) and ``y = norm(new_residual)``.
        """
        if post is not None:  # post_add: (scale, next_norm)
            scale, next_norm = post
            if summed is not None:
                x_norm, x2, x2_norm = summed
                return self.ops.dual_post_norm_residual(x, x_norm.weight, x2, x2_norm.weight, residual, self.weight,
                                                        self.eps, self.zero_centered, scale,
                                                        None if next_norm is None else next_norm.weight)
            return self.ops.post_norm_residual(x, residual, self.weight, self.eps, self.zero_centered, scale,
                                               None if next_norm is None else next_norm.weight)
        if fuse_add:
            return self.ops.add_rms_norm(x, residual, self._weight(x), self.eps, self.zero_centered)
        return self.ops.rms_norm(x, self._weight(x), self.eps, self.zero_centered)

    def add_and_norm(self, x: torch.Tensor, residual: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(norm(x + residual), x + residual)`` in one ``add_rms_norm`` launch (``residual`` None:
        ``(norm(x), x)``): the residual add of a pre-norm block fused into the next norm. Goes through
        ``__call__``, so module hooks (the profiler's) see it as this norm's forward."""
        return self(x, residual, fuse_add=True)

    def add_norm_linear(self, x: torch.Tensor, residual: torch.Tensor | None,
                        linear: nn.Linear) -> tuple[torch.Tensor, torch.Tensor]:
        """``(linear(norm(x + residual)), x + residual)``: the residual add and this norm fused into
        the projection that reads the normalised rows (the ``add_rms_norm_linear`` op: one launch at
        decode on GPUs). ``linear`` must have no bias for the fused op; with a bias the add + norm
        run as :meth:`add_and_norm`, then ``linear``.

        Args:
            x, residual: ``[T, D]`` (residual None: the stream starts at x).
            linear: ``nn.Linear`` with ``weight`` ``[N, D]``, or a
                :class:`~anna_core.layers.wq_linear.WQLinear` (its ``add_rms_norm_wq_linear`` op).

        Returns:
            ``([T, N], [T, D])`` in x's dtype.
        """
        if linear.bias is not None:
            y, new_residual = self.add_and_norm(x, residual)
            return linear(y), new_residual
        if isinstance(linear, WQLinear):  # a quantized weight: its own fused op
            return linear.add_norm(x, residual, self._weight(x), self.eps, self.zero_centered)
        return self.ops.add_rms_norm_linear(x, residual, self._weight(x), self.eps, self.zero_centered, linear.weight)

    def add_norm_linear_act_mul(self, x: torch.Tensor, residual: torch.Tensor | None, gate_up: nn.Linear,
                                activation: str = "silu") -> tuple[torch.Tensor, torch.Tensor]:
        """``(act_and_mul(gate_up(norm(x + residual)), activation), x + residual)``: the residual add and
        this norm fused into a merged, bias-free gate/up projection and its gated product (the
        ``add_rms_norm_linear_act_mul`` op: one launch at decode on GPUs). With a bias on ``gate_up``
        the add + norm run as :meth:`add_and_norm`, then ``gate_up`` and the gated product.

        Args:
            x, residual: ``[T, D]`` (residual None: the stream starts at x).
            gate_up: ``nn.Linear`` with ``weight`` ``[2I, D]`` (gate rows, then up rows), or a
                :class:`~anna_core.layers.wq_linear.WQLinear` (its ``add_rms_norm_wq_linear`` op).
            activation: ``"silu"`` (SwiGLU) or ``"gelu_tanh"`` (GeGLU).

        Returns:
            ``([T, I], [T, D])`` in x's dtype.

        Raises:
            ValueError: an unknown activation (from the op).
        """
        if gate_up.bias is not None:
            from anna_core.kernels.reference.activations import act_and_mul

            y, new_residual = self.add_and_norm(x, residual)
            h = gate_up(y)
            return (self.ops.silu_and_mul(h) if activation == "silu" else act_and_mul(h, activation)), new_residual
        if isinstance(gate_up, WQLinear):  # a quantized weight: its own fused op
            return gate_up.add_norm(x, residual, self._weight(x), self.eps, self.zero_centered, activation)
        return self.ops.add_rms_norm_linear_act_mul(x, residual, self._weight(x), self.eps, self.zero_centered,
                                                    gate_up.weight, activation)

    def post_add(self, x: torch.Tensor, residual: torch.Tensor, scale: torch.Tensor | None = None,
                 next_norm: RMSNorm | None = None) -> tuple[torch.Tensor | None, torch.Tensor]:
        """A sandwich-normed block's tail (Gemma): ``r = residual + norm(x)``, then ``r * scale`` when
        ``scale`` is given, and the next norm of ``r`` (``next_norm``'s, e.g. the next block's input norm),
        as one ``post_norm_residual`` launch on GPUs.

        Args:
            x: ``[T, D]`` the block's output; residual: ``[T, D]`` the stream, x's dtype.
            scale: ``[1]`` in x's dtype (a layer scalar), or None.
            next_norm: an :class:`RMSNorm` over the same ``D`` with this norm's ``eps`` and
                ``zero_centered``, or None.

        Returns:
            ``(next_norm(r) or None, r)``, both ``[T, D]`` in x's dtype.

        Raises:
            ValueError: this norm or ``next_norm`` has no weight, or they differ in eps / zero_centered.
        """
        self._check_post(next_norm)
        return self(x, residual, post=(scale, next_norm))  # through __call__: the profiler's hooks see it

    def post_add_linear(self, x: torch.Tensor, residual: torch.Tensor, scale: torch.Tensor | None,
                        next_norm: RMSNorm | None, linear: nn.Linear,
                        activation: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`post_add` fused into the projection that reads its result (the ``post_norm_residual_linear``
        op: one launch at decode on GPUs): ``(y, r)`` with ``(h, r) = post_add(x, residual, scale, next_norm)``
        and ``y = linear(h)`` (``h = r`` without ``next_norm``), or with an activation the gated product of the
        merged gate/up projection ``linear``. A ``linear`` with a bias runs :meth:`post_add`, then ``linear``.

        Args:
            x, residual, scale, next_norm: as :meth:`post_add`.
            linear: ``nn.Linear`` with ``weight`` ``[N, D]`` (``[2I, D]``, gate rows then up rows, with an
                activation).
            activation: None, ``"silu"`` or ``"gelu_tanh"``.

        Returns:
            ``([T, N] (or [T, I]), [T, D])`` in x's dtype.

        Raises:
            ValueError: as :meth:`post_add`; an unknown activation (from the op).
        """
        if linear.bias is not None:
            from anna_core.kernels.reference.activations import act_and_mul

            y, r = self.post_add(x, residual, scale, next_norm)
            h = linear(r if y is None else y)
            return (h if activation is None else act_and_mul(h, activation)), r
        self._check_post(next_norm)
        return self.ops.post_norm_residual_linear(x, residual, self.weight, self.eps, self.zero_centered, scale,
                                                  None if next_norm is None else next_norm.weight, linear.weight,
                                                  activation)

    def _check_post(self, next_norm: RMSNorm | None) -> None:
        if self.weight is None or (next_norm is not None and next_norm.weight is None):
            raise ValueError("post_add needs norms with a weight")
        if next_norm is not None and (next_norm.eps, next_norm.zero_centered) != (self.eps, self.zero_centered):
            raise ValueError("post_add: the next norm must share eps and zero_centered with this one")

    def post_add_sum(self, x: torch.Tensor, x_norm: RMSNorm, x2: torch.Tensor, x2_norm: RMSNorm,
                     residual: torch.Tensor, scale: torch.Tensor | None = None,
                     next_norm: RMSNorm | None = None) -> tuple[torch.Tensor | None, torch.Tensor]:
        """:meth:`post_add` of the sum of two normalised block outputs (Gemma 4's MoE layer: the dense MLP's
        and the experts'): ``r = residual + norm(x_norm(x) + x2_norm(x2))``, then the scale and the next
        norm as :meth:`post_add`, as one ``dual_post_norm_residual`` launch on GPUs (instead of four).

        Args:
            x, x2: ``[T, D]`` the two block outputs, one dtype; x_norm, x2_norm: their post norms
                (:class:`RMSNorm` with a weight, this norm's ``D``, ``eps`` and ``zero_centered``);
            residual, scale, next_norm: as :meth:`post_add`.

        Returns:
            ``(next_norm(r) or None, r)``, both ``[T, D]`` in x's dtype.

        Raises:
            ValueError: a norm has no weight, or they differ in eps / zero_centered.
        """
        norms = [self, x_norm, x2_norm] + ([next_norm] if next_norm is not None else [])
        if any(n.weight is None for n in norms):
            raise ValueError("post_add_sum needs norms with a weight")
        if any((n.eps, n.zero_centered) != (self.eps, self.zero_centered) for n in norms):
            raise ValueError("post_add_sum: every norm must share eps and zero_centered with this one")
        return self(x, residual, post=(scale, next_norm), summed=(x_norm, x2, x2_norm))  # through __call__

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}, zero_centered={self.zero_centered}, scale={self.scale}"
