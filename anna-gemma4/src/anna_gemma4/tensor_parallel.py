"""How a Gemma 4 text model splits over a tensor-parallel group (:mod:`anna_core.distributed`).

Attention: ``q_proj``, ``k_proj``, ``v_proj`` column-parallel by heads in every layer kind (sliding and global
layers each with their own head dim and KV heads; a KV-shared layer reads its owner's heads on the same rank),
``o_proj`` row-parallel; the q / k / v norms act per head and are replicated. MLP: ``gate_proj`` / ``up_proj``
column-parallel, ``down_proj`` row-parallel. MoE block (26B-A4B): the router replicated, every expert's
intermediate units split, the experts' summed output all-reduced once (its norm needs the whole row, so the MLP
and the experts reduce apart). Per-layer embeddings (E2B / E4B) are small and stay replicated. ``embed_tokens``
and an untied ``lm_head``: vocabulary-parallel, the (soft-capped, elementwise) logits gathered.
"""

from __future__ import annotations

import attrs
from anna_core.distributed.sharding import Shard
from anna_core.distributed.state import ParallelState
from anna_core.errors import AnnaError, ModelLoadError

from anna_gemma4.config import Gemma4Config

ROW = r"(self_attn\.o_proj|mlp\.down_proj)$"
"""Modules that become :class:`~anna_core.distributed.layers.RowParallelLinear`."""
VOCAB = r"^(model\.embed_tokens|lm_head)$"
"""Vocabulary-sharded modules (not ``embed_tokens_per_layer``)."""


def rules(cfg: Gemma4Config) -> tuple[tuple[str, Shard], ...]:
    """Parameter name -> shard for the whole (not local) ``cfg``; other parameters are replicated."""
    moe = cfg.moe_intermediate_size
    return (
        (r"self_attn\.(q_proj|k_proj|v_proj)\.(weight|bias)$", Shard(0)),
        (r"self_attn\.o_proj\.weight$", Shard(1)),
        (r"mlp\.(gate_proj|up_proj)\.weight$", Shard(0)),
        (r"mlp\.down_proj\.weight$", Shard(1)),
        (r"experts\.gate_up_proj$", Shard(1, segments=(moe, moe))),
        (r"experts\.down_proj$", Shard(2)),
        (r"^(model\.embed_tokens|lm_head)\.weight$", Shard(0, pad=True)),
    )


def local_config(cfg: Gemma4Config, parallel: ParallelState) -> Gemma4Config:
    """``cfg`` with one rank's share of the attention heads, each layer's KV heads and MLP units, and the experts'
    units.

    Raises:
        ModelLoadError: the group's size does not divide one of them.
    """
    p = parallel
    try:
        layers = tuple(attrs.evolve(spec, num_kv_heads=p.shard_size(spec.num_kv_heads, f"layer {i}'s KV heads"),
                                    intermediate_size=p.shard_size(spec.intermediate_size, f"layer {i}'s MLP width"))
                       for i, spec in enumerate(cfg.layers))
        return attrs.evolve(cfg, layers=layers,
                            num_attention_heads=p.shard_size(cfg.num_attention_heads, "attention heads"),
                            moe_intermediate_size=p.shard_size(cfg.moe_intermediate_size, "moe_intermediate_size"))
    except AnnaError as exc:
        raise ModelLoadError(str(exc)) from exc


def check_group_size(config: dict, size: int) -> None:
    """Whether ``size`` ranks divide what :func:`local_config` splits, from the checkpoint's ``config.json`` (the
    family's ``tensor_parallel_check``: the caller checks before it spawns the workers).

    Raises:
        ModelLoadError: ``size`` does not divide one of them (the message names it).
    """
    local_config(Gemma4Config.from_hf(config), ParallelState(world_size=size))
