"""One Gemma 4 decoder layer: sandwich-normed attention and feed-forward blocks, the optional MoE
block beside the dense MLP, the optional per-layer-embedding block, and the layer scalar.

The math (transformers' ``Gemma4TextDecoderLayer``)::

    h = h + post_attn_norm(attn(input_norm(h)))
    m = mlp(pre_ff_norm(h))
    m = post_ff_norm_1(m) + post_ff_norm_2(experts(pre_ff_norm_2(h), router(h)))   # MoE layers only
    h = h + post_ff_norm(m)
    h = h + post_per_layer_norm(per_layer_projection(gelu_tanh(per_layer_gate(h)) * per_layer_input))  # PLE only (gated_linear)
    h = h * layer_scalar

Every norm is an RMSNorm multiplying by its weight (not ``1 + weight``). Each residual add runs as one
``post_norm_residual`` op with the norm before it, the layer scalar and the norm after it; in a dense layer
the attention's tail runs inside the MLP's gate/up projection and, with per-layer embeddings, the MLP's tail
inside the per-layer-input gate's projection, and the layer's last residual add (with the layer scalar) is
handed to the next layer as a :class:`PendingTail`, which runs it with its input norm inside its q/k/v (q in a
KV-shared layer) projection (``post_norm_residual_linear``: one launch each at decode on GPUs); after the last
layer the model's final norm applies it. In an MoE layer the feed-forward tail (both post norms,
their sum, ``post_ff_norm``, the residual add, ...) is one ``dual_post_norm_residual`` op, and the
attention's tail also gives ``pre_ff_norm_2(h)`` and the router's input (one ``post_norm_residual_norm_pair``
launch on GPUs; elsewhere ``post_norm_residual`` and ``rms_norm_pair``). Where a kernel serves
``post_norm_residual_gated_linear`` (opt-in on GPUs), a dense layer's MLP tail, per-layer-input gate and projection
run as that one op (one launch at batch-1 decode instead of two).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from anna_core.distributed.state import SINGLE, ParallelState
from anna_core.engine.forward_batch import ForwardBatch
from anna_core.layers.mlp import SwiGLUMLP
from anna_core.layers.norm import RMSNorm
from anna_core.layers.rotary import RotaryEmbedding
from anna_core.model import ModelCaches
from torch import nn

from anna_gemma4.attention import Gemma4Attention
from anna_gemma4.config import Gemma4Config, LayerSpec
from anna_gemma4.moe import Gemma4Experts, Gemma4Router


@dataclass(frozen=True)
class PendingTail:
    """A layer's last residual add, handed to the next layer to run inside its q/k/v projection's prologue (or to
    the model's final norm): the stream after the layer is ``(h + norm(x)) * scale``.

    Attributes:
        x: ``[T, hidden]`` the last block's output; norm: its post norm (:class:`RMSNorm` with a weight);
        scale: the layer scalar ``[1]`` (x's dtype), or None.
    """

    x: torch.Tensor
    norm: RMSNorm
    scale: torch.Tensor | None

    def apply(self, h: torch.Tensor, next_norm: RMSNorm) -> tuple[torch.Tensor, torch.Tensor]:
        """h ``[T, hidden]`` (the stream before the add) -> ``(next_norm(h'), h')``: one ``post_norm_residual``."""
        y, h = self.norm.post_add(self.x, h, self.scale, next_norm)
        return y, h


class Gemma4DecoderLayer(nn.Module):
    """Parameters (checkpoint names under ``model.layers.{i}.``): ``self_attn.*``, ``mlp.gate_proj|up_proj|
    down_proj``, ``input_layernorm``, ``post_attention_layernorm``, ``pre_feedforward_layernorm``,
    ``post_feedforward_layernorm``, ``layer_scalar`` ``[1]``; with the MoE block ``router.*``,
    ``experts.*``, ``pre_feedforward_layernorm_2``, ``post_feedforward_layernorm_1|2``; with per-layer
    embeddings ``per_layer_input_gate`` ``[P, hidden]``, ``per_layer_projection`` ``[hidden, P]``,
    ``post_per_layer_input_norm``.
    """

    def __init__(self, cfg: Gemma4Config, layer: LayerSpec, group: int, kv_index: int, rotary: RotaryEmbedding,
                 ops: Any, parallel: ParallelState = SINGLE):
        super().__init__()
        hidden, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.kind = layer.kind
        self.self_attn = Gemma4Attention(cfg, layer, group, kv_index, rotary, ops)
        self.mlp = SwiGLUMLP(hidden, layer.intermediate_size, ops, activation="gelu_tanh")
        self.input_layernorm = RMSNorm(hidden, eps, ops)
        self.post_attention_layernorm = RMSNorm(hidden, eps, ops)
        self.pre_feedforward_layernorm = RMSNorm(hidden, eps, ops)
        self.post_feedforward_layernorm = RMSNorm(hidden, eps, ops)
        self.layer_scalar = nn.Parameter(torch.ones(1))
        self.has_moe = cfg.enable_moe_block
        if self.has_moe:
            self.router = Gemma4Router(hidden, cfg.num_experts, cfg.top_k_experts, eps, ops)
            self.experts = Gemma4Experts(hidden, cfg.num_experts, cfg.moe_intermediate_size, ops, cfg.top_k_experts,
                                         parallel)
            self.pre_feedforward_layernorm_2 = RMSNorm(hidden, eps, ops)
            self.post_feedforward_layernorm_1 = RMSNorm(hidden, eps, ops)
            self.post_feedforward_layernorm_2 = RMSNorm(hidden, eps, ops)
        self.ops = ops
        self.has_per_layer_input = cfg.hidden_size_per_layer_input > 0
        if self.has_per_layer_input:
            per_layer = cfg.hidden_size_per_layer_input
            self.per_layer_input_gate = nn.Linear(hidden, per_layer, bias=False)
            self.per_layer_projection = nn.Linear(per_layer, hidden, bias=False)
            self.post_per_layer_input_norm = RMSNorm(hidden, eps, ops)

    def forward(self, h: torch.Tensor, carry: torch.Tensor | PendingTail, per_layer_input: torch.Tensor | None,
                batch: ForwardBatch, caches: ModelCaches, cos_sin: Callable[[], tuple[torch.Tensor, torch.Tensor]],
                next_norm: RMSNorm) -> tuple[torch.Tensor, torch.Tensor | PendingTail]:
        """h: ``[T, hidden]`` the residual stream; carry: what the layer before handed on — ``input_layernorm(h)``
        ``[T, hidden]``, or a :class:`PendingTail` (the layer before's last residual add, not yet applied to h);
        per_layer_input: ``[T, P]`` (None without per-layer embeddings); cos_sin: gives the rotary table of this
        layer's kind (:meth:`~anna_gemma4.common.RotaryTables.of`); next_norm: the norm of the next layer's input (its ``input_layernorm``, or the model's final norm)
        -> ``(h', carry')``: a dense layer (or one with per-layer embeddings) hands on its own last residual add
        as a :class:`PendingTail`, an MoE layer without them ``next_norm(h')`` ``[T, hidden]``.

        Every residual add runs fused with the norm before and after it (``post_norm_residual``); a pending tail
        runs inside this layer's q/k/v projection (``post_norm_residual_linear``)."""
        attn_input, projected, h = self._attention_input(h, carry)
        a = self.self_attn(attn_input, batch, caches, cos_sin, projected)
        if self.has_moe:  # h's four norms (the MLP's, the experts', the router's) with the residual add
            y, x, router_input, h = self._post_attention_moe(a, h)
            m = self.mlp(y)
        else:  # the attention's tail fused into the MLP's gate/up projection (post_norm_residual_linear)
            m, h = self.mlp(a, post_norm=(self.post_attention_layernorm, h, self.pre_feedforward_layernorm))
        if self.has_moe:
            moe = self.experts(x, *self.router(router_input))
            if not self.has_per_layer_input:
                # post_ff_norm(post_ff_norm_1(m) + post_ff_norm_2(moe)) + h, scaled, normed again: one launch
                y, h = self.post_feedforward_layernorm.post_add_sum(m, self.post_feedforward_layernorm_1, moe,
                                                                    self.post_feedforward_layernorm_2, h,
                                                                    self.layer_scalar, next_norm)
                return h, y
            _, h = self.post_feedforward_layernorm.post_add_sum(m, self.post_feedforward_layernorm_1, moe,
                                                                self.post_feedforward_layernorm_2, h)
        elif not self.has_per_layer_input:  # the last residual add, left to the next layer's projection
            return h, PendingTail(m, self.post_feedforward_layernorm, self.layer_scalar)
        block = None if self.has_moe else self._per_layer_block()
        if block is not None:  # the MLP's tail, the per-layer-input gate and projection: one launch at decode
            post = self.post_feedforward_layernorm
            p, h = block(m, h, post.weight, post.eps, post.zero_centered, None, self.per_layer_input_gate.weight,
                         per_layer_input, self.per_layer_projection.weight, "gelu_tanh")
            return h, PendingTail(p, self.post_per_layer_input_norm, self.layer_scalar)
        if self.has_moe:
            gate = self.per_layer_input_gate(h)
        else:  # the MLP's tail fused into the per-layer-input gate's projection (post_norm_residual_linear)
            gate, h = self.post_feedforward_layernorm.post_add_linear(m, h, None, None, self.per_layer_input_gate)
        # per_layer_projection(gelu_tanh(per_layer_input_gate(h)) * per_layer_input): one GEMV with the product
        p = self.ops.gated_linear(gate, per_layer_input, self.per_layer_projection.weight, "gelu_tanh")  # [T, hidden]
        return h, PendingTail(p, self.post_per_layer_input_norm, self.layer_scalar)  # the last add, left to the next

    def _per_layer_block(self) -> Any:
        """The ``post_norm_residual_gated_linear`` op (the MLP's tail, then ``per_layer_projection(gelu_tanh(
        per_layer_input_gate(h')) * per_layer_input)``) where a kernel, not only its reference, serves it and both
        projections are dense (a quantized one, ``WQLinear``, runs the unfused ops); else None."""
        if not all(isinstance(m, nn.Linear) and m.bias is None
                   for m in (self.per_layer_input_gate, self.per_layer_projection)):
            return None
        return self.ops.accelerated("post_norm_residual_gated_linear")

    def _attention_input(self, h: torch.Tensor, carry: torch.Tensor | PendingTail,
                         ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor]:
        """``(x, projected, h')`` for the attention: x = ``input_layernorm(h')`` or, where the attention has one
        input projection, None and projected = that projection of it; h' = h after the pending tail's add.
        A pending tail, this layer's input norm and the projection run as one ``post_norm_residual_linear``
        (one launch at batch-1 decode on GPUs)."""
        if not isinstance(carry, PendingTail):
            return carry, None, h
        projection = self.self_attn.input_projection()
        if projection is None:  # q/k/v not merged: the tail with this layer's input norm, then the projections
            y, h = carry.apply(h, self.input_layernorm)
            return y, None, h
        projected, h = carry.norm.post_add_linear(carry.x, h, carry.scale, self.input_layernorm, projection)
        return None, projected, h

    def _post_attention_moe(self, a: torch.Tensor,
                            h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """An MoE layer's attention tail: ``h' = h + post_attention_layernorm(a)`` -> ``(pre_ff_norm(h'),
        pre_ff_norm_2(h'), the router input of h', h')``, one ``post_norm_residual_norm_pair`` launch where an
        accelerated kernel has it, else ``post_norm_residual`` then ``rms_norm_pair`` (each its fastest kernel)."""
        post, pre, pre_2 = self.post_attention_layernorm, self.pre_feedforward_layernorm, self.pre_feedforward_layernorm_2
        fused = self.ops.accelerated("post_norm_residual_norm_pair")
        if fused is None:
            y, h = post.post_add(a, h, next_norm=pre)
            return (y, *self.router.inputs(h, pre_2), h)
        return fused(a, h, post.weight, post.eps, post.zero_centered, pre.weight, pre_2.weight, self.router.scale,
                     self.router.root_scale)

    def merge_projections(self) -> None:
        """Merge the attention's q/k/v and the dense MLP's gate/up projections (one GEMM each); the math is
        unchanged."""
        self.self_attn.merge_projections()
        self.mlp.merge_gate_up()
