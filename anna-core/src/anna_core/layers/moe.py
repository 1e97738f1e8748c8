"""The routed experts of a mixture-of-experts block, as a kind of module the engine's tools recognise."""

from __future__ import annotations

from torch import nn

DUMMY_ROUTER_LOGIT_STD = 4.0
"""Standard deviation of the router logits that random (``--load-format dummy``) weights are drawn to
give. A router whose logits spread like this is decisive: the margin between the ``K``-th and the
``K+1``-th expert of a token is large against 16-bit rounding, so a bf16 run chooses the experts a float32
run of the same weights chooses, and its logits can be compared with HF's (with the default ``std = 0.02``
the margins are a few hundredths and every layer of a deep model flips some choices, which compounds).
Routing still spreads: each token's choice follows its own hidden state, uniformly over the experts.
A family's dummy-weight hook (``materialize_dummy(init=...)``) draws its router matrix with the standard
deviation that gives this logit spread for its router's input scale."""


class RoutedExpertsModule(nn.Module):
    """Base class of a MoE block's stacked routed experts (a family's module computing them, e.g. through
    the ``moe_experts`` op). It declares the routing geometry, so that the decode roofline
    (:func:`anna_core.bench.roofline.weight_bytes`) counts only the experts a step can touch: of ``E``
    experts with ``K`` chosen per token, a batch of ``B`` tokens hits ``E * (1 - (1 - K/E) ** B)`` of them
    on average under uniform routing (``K`` at batch 1), and its parameters' bytes scale by that share.

    A subclass holds the stacked weights ``gate_up_proj [E, 2I, H]`` / ``down_proj [E, H, I]``, runs them as
    ``moe_experts(x, gate_up_proj, down_proj, weights, experts, activation)`` from ``forward(x, weights,
    experts)``, and declares its ``activation`` and ``ops`` (the op table), so that expert offload
    (:class:`anna_core.layers.expert_offload.OffloadedExperts`) can take its place.

    Args:
        num_experts: ``E``; top_k: ``K`` (``1 <= K <= E``).

    Raises:
        ValueError: ``top_k`` outside ``[1, num_experts]``.
    """

    activation: str = "silu"
    """The experts' gated activation (``moe_experts``'s ``activation``)."""

    def __init__(self, num_experts: int, top_k: int):
        super().__init__()
        if not 1 <= top_k <= num_experts:
            raise ValueError(f"top_k {top_k} must be in [1, num_experts={num_experts}]")
        self.num_experts = num_experts
        self.top_k = top_k

    def expected_hit_fraction(self, tokens: int) -> float:
        """Expected share of the experts ``tokens`` routed tokens touch (uniform, independent routing)."""
        return 1.0 - (1.0 - self.top_k / self.num_experts) ** max(1, tokens)
