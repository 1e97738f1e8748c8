"""How a Llama splits over a tensor-parallel group (:mod:`anna_core.distributed`).

Column-parallel: ``q_proj``, ``k_proj``, ``v_proj`` (each rank its attention and KV heads), ``gate_proj`` and
``up_proj`` (its intermediate units). Row-parallel, one all-reduce each: ``o_proj``, ``down_proj``.
Vocabulary-parallel: ``embed_tokens`` and an untied ``lm_head`` (logits gathered over the ranks). Norms are
replicated.
"""

from __future__ import annotations

import attrs
from anna_core.distributed.sharding import Shard
from anna_core.distributed.state import ParallelState
from anna_core.errors import AnnaError, ModelLoadError

from anna_llama.config import LlamaConfig

ROW = r"\.(o_proj|down_proj)$"
"""Modules that become :class:`~anna_core.distributed.layers.RowParallelLinear`."""
VOCAB = r"^(model\.embed_tokens|lm_head)$"
"""Vocabulary-sharded modules."""
RULES = (
    (r"\.(q_proj|k_proj|v_proj|gate_proj|up_proj)\.(weight|bias)$", Shard(0)),
    (r"\.(o_proj|down_proj)\.weight$", Shard(1)),
    (r"^(model\.embed_tokens|lm_head)\.weight$", Shard(0, pad=True)),
)
"""Parameter name -> shard (anything else is replicated)."""


def local_config(cfg: LlamaConfig, parallel: ParallelState) -> LlamaConfig:
    """``cfg`` with one rank's share of the attention heads, KV heads and intermediate units.

    Raises:
        ModelLoadError: the group's size does not divide one of them.
    """
    try:
        return attrs.evolve(cfg, num_attention_heads=parallel.shard_size(cfg.num_attention_heads, "attention heads"),
                            num_key_value_heads=parallel.shard_size(cfg.num_key_value_heads, "KV heads"),
                            intermediate_size=parallel.shard_size(cfg.intermediate_size, "intermediate_size"))
    except AnnaError as exc:
        raise ModelLoadError(str(exc)) from exc


def check_group_size(config: dict, size: int) -> None:
    """Whether ``size`` ranks divide what :func:`local_config` splits, from the checkpoint's ``config.json`` (the
    family's ``tensor_parallel_check``: the caller checks before it spawns the workers).

    Raises:
        ModelLoadError: ``size`` does not divide one of them (the message names it).
    """
    local_config(LlamaConfig.from_hf(config), ParallelState(world_size=size))
