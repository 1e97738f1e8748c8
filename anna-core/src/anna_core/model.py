"""What a model family hands the engine: cache specs, the model protocol and the loaded bundle."""

from __future__ import annotations

from typing import Any, Protocol

import attrs
import torch

from anna_core.engine.forward_batch import ForwardBatch


@attrs.frozen
class AttentionCacheSpec:
    """Paged KV cache needs of the model's full-attention layers.

    Attributes:
        num_layers: number of layers with a KV cache (layer ``i`` uses ``caches.kv[i]``).
        num_kv_heads: KV heads per layer.
        head_dim: dimension of each head.
    """

    num_layers: int
    num_kv_heads: int
    head_dim: int


@attrs.frozen
class RecurrentStateSpec:
    """State-slot needs of the model's recurrent (gated DeltaNet) layers.

    Attributes:
        num_layers: number of recurrent layers (layer ``i`` uses ``caches.conv_states[i]`` and
            ``caches.recurrent_states[i]``).
        conv_shape: per-slot conv state shape ``(C, W-1)`` (serving dtype).
        state_shape: per-slot recurrent state shape ``(H_v, K, V)`` (float32).
    """

    num_layers: int
    conv_shape: tuple[int, int]
    state_shape: tuple[int, int, int]


@attrs.frozen
class CacheSpec:
    attention: AttentionCacheSpec | None = None
    recurrent: RecurrentStateSpec | None = None


@attrs.define
class ModelCaches:
    """Device tensors of all caches, allocated by the engine from the model's :class:`CacheSpec`.

    Attributes:
        block_size: tokens per KV block.
        kv: per attention layer, ``(k_cache, v_cache)`` each ``[num_blocks, block_size, H_kv, D]``.
        conv_states: per recurrent layer, ``[num_slots, C, W-1]``.
        recurrent_states: per recurrent layer, ``[num_slots, H_v, K, V]`` float32.
    """

    block_size: int
    kv: list[tuple[torch.Tensor, torch.Tensor]] = attrs.field(factory=list)
    conv_states: list[torch.Tensor] = attrs.field(factory=list)
    recurrent_states: list[torch.Tensor] = attrs.field(factory=list)


class CausalLM(Protocol):
    """The protocol a family's model (a ``torch.nn.Module``) implements."""

    cache_spec: CacheSpec
    vocab_size: int
    """Rows of the LM head: token ids ``>= vocab_size`` are rejected before a step (prompt ids,
    ``logit_bias`` keys)."""

    def forward(self, batch: ForwardBatch, caches: ModelCaches) -> torch.Tensor:
        """Hidden states ``[T, hidden]`` after the final norm, for every token of ``batch``."""

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits ``[N, vocab]`` float32 for hidden rows ``[N, hidden]``."""


@attrs.define
class GenerationDefaults:
    """Generation settings that come with a checkpoint.

    Attributes:
        eos_token_ids: ids that end generation (``generation_config.json``, else the tokenizer /
            GGUF metadata).
        sampling: default sampling fields from ``generation_config.json`` (``temperature``,
            ``top_p``, ``top_k``, ...), applied when a request leaves them unset.
    """

    eos_token_ids: list[int] = attrs.field(factory=list)
    sampling: dict[str, Any] = attrs.field(factory=dict)


@attrs.define
class LoadedModel:
    """A family loader's result.

    Attributes:
        model: the ``CausalLM`` module, on its device, in eval mode.
        tokenizer: :class:`anna_core.tokenizer.Tokenizer` (None for token-id-only dummy loads).
        generation: checkpoint generation defaults.
        max_model_len: the checkpoint's context limit (``max_position_embeddings``).
        family: family name (``"qwen35"``).
        dtype: the serving dtype.
        device: the device.
    """

    model: Any
    tokenizer: Any
    generation: GenerationDefaults
    max_model_len: int
    family: str
    dtype: torch.dtype
    device: torch.device
