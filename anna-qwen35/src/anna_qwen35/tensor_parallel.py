"""How a Qwen3.5 model (dense or MoE, text) splits over a tensor-parallel group (:mod:`anna_core.distributed`).

* Gated attention: ``q_proj`` (each head's query and gate rows), ``k_proj``, ``v_proj`` column-parallel by
  heads; ``o_proj`` row-parallel (one all-reduce); ``q_norm`` / ``k_norm`` replicated.
* Gated DeltaNet: ``in_proj_qkv`` and ``conv1d`` split by key heads within each of the q, k, v parts and by
  value heads; ``in_proj_z``, ``in_proj_a``, ``in_proj_b``, ``A_log``, ``dt_bias`` by value heads (contiguous
  blocks of key and value heads, so each value head keeps its key head); ``out_proj`` row-parallel. Each rank
  holds its heads' conv and recurrent states (the cache spec is built from the local config).
* Dense MLP: ``gate_proj`` / ``up_proj`` column-parallel, ``down_proj`` row-parallel.
* MoE block: the router and ``shared_expert_gate`` replicated; every expert's and the shared expert's
  intermediate units split like the dense MLP's; the block sums its routed and shared partial outputs and
  all-reduces once (:class:`~anna_qwen35.moe.SparseMoeBlock`).
* ``embed_tokens`` and an untied ``lm_head``: vocabulary-parallel, logits gathered.
"""

from __future__ import annotations

import attrs
from anna_core.distributed.sharding import Shard
from anna_core.distributed.state import ParallelState
from anna_core.errors import AnnaError, ModelLoadError

from anna_qwen35.config import Qwen35Config

ROW = r"(self_attn\.o_proj|linear_attn\.out_proj|^model\.layers\.\d+\.mlp\.down_proj)$"
"""Modules that become :class:`~anna_core.distributed.layers.RowParallelLinear` (the MoE block's shared expert
down projection is not one: the block reduces once)."""
VOCAB = r"^(model\.embed_tokens|lm_head)$"
"""Vocabulary-sharded modules."""


def rules(cfg: Qwen35Config) -> tuple[tuple[str, Shard], ...]:
    """Parameter name -> shard for the whole (not local) ``cfg``; other parameters are replicated."""
    key_dim = cfg.linear_num_key_heads * cfg.linear_key_head_dim
    value_dim = cfg.linear_num_value_heads * cfg.linear_value_head_dim
    qkv = Shard(0, segments=(key_dim, key_dim, value_dim))
    moe = cfg.moe_intermediate_size
    return (
        (r"self_attn\.(q_proj|k_proj|v_proj)\.(weight|bias)$", Shard(0)),
        (r"self_attn\.o_proj\.weight$", Shard(1)),
        (r"linear_attn\.(in_proj_qkv|conv1d)\.weight$", qkv),
        (r"linear_attn\.(in_proj_z\.weight|in_proj_a\.weight|in_proj_b\.weight|A_log|dt_bias)$", Shard(0)),
        (r"linear_attn\.out_proj\.weight$", Shard(1)),
        (r"mlp\.experts\.gate_up_proj$", Shard(1, segments=(moe, moe))),
        (r"mlp\.experts\.down_proj$", Shard(2)),
        (r"mlp\.(experts\.\d+\.|shared_expert\.)?(gate_proj|up_proj)\.weight$", Shard(0)),
        (r"mlp\.(experts\.\d+\.|shared_expert\.)?down_proj\.weight$", Shard(1)),
        (r"^(model\.embed_tokens|lm_head)\.weight$", Shard(0, pad=True)),
    )


def local_config(cfg: Qwen35Config, parallel: ParallelState) -> Qwen35Config:
    """``cfg`` with one rank's share of the attention, KV, DeltaNet key and value heads and of the MLP's (or the
    experts' and shared expert's) intermediate units.

    Raises:
        ModelLoadError: the group's size does not divide one of them.
    """
    p = parallel
    try:
        return attrs.evolve(
            cfg, num_attention_heads=p.shard_size(cfg.num_attention_heads, "attention heads"),
            num_key_value_heads=p.shard_size(cfg.num_key_value_heads, "KV heads"),
            linear_num_key_heads=p.shard_size(cfg.linear_num_key_heads, "gated DeltaNet key heads"),
            linear_num_value_heads=p.shard_size(cfg.linear_num_value_heads, "gated DeltaNet value heads"),
            intermediate_size=p.shard_size(cfg.intermediate_size, "intermediate_size"),
            moe_intermediate_size=p.shard_size(cfg.moe_intermediate_size, "moe_intermediate_size"),
            shared_expert_intermediate_size=p.shard_size(cfg.shared_expert_intermediate_size,
                                                         "shared_expert_intermediate_size"))
    except AnnaError as exc:
        raise ModelLoadError(str(exc)) from exc


def check_group_size(config: dict, size: int) -> None:
    """Whether ``size`` ranks divide what :func:`local_config` splits, from the checkpoint's ``config.json`` (the
    family's ``tensor_parallel_check``: the caller checks before it spawns the workers).

    Raises:
        ModelLoadError: ``size`` does not divide one of them (the message names it).
    """
    local_config(Qwen35Config.from_hf(config), ParallelState(world_size=size))
