"""What a model family hands the engine: cache groups, capabilities, the model protocol and the loaded bundle."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import attrs
import torch

from anna_core.cache_spec import (
    CacheGroupSpec,
    CacheSpec,
    FullAttentionSpec,
    RecurrentStateSpec,
    SlidingWindowSpec,
)
from anna_core.engine.forward_batch import ForwardBatch
from anna_core.errors import AnnaError
from anna_core.multimodal import MODALITIES

if TYPE_CHECKING:
    from anna_core.kv_quant.residual import ResidualRing
    from anna_core.kv_quant.tables import TurboQuantTables
    from anna_core.tokenizer import Tokenizer

__all__ = [
    "AttentionCache", "CacheGroupSpec", "CacheSpec", "CausalLM", "FullAttentionSpec", "GenerationDefaults",
    "LoadedModel", "ModelCaches", "ModelCapabilities", "RecurrentStateSpec", "SlidingWindowSpec", "StateCache",
    "check_model",
]


@attrs.define
class AttentionCache:
    """The device tensors of one attention cache group.

    Attributes:
        k, v: per owning layer of the group (its spec's ``layers`` order),
            ``[num_blocks + 1, block_size, H_kv, D]``; the last block is the group's scratch block. In a
            quantized group (``quant`` set) ``uint8`` ``[num_blocks + 1, block_size, H_kv, row_bytes]``
            (:mod:`anna_core.kv_quant.layout`).
        quant: the group's :class:`~anna_core.kv_quant.tables.TurboQuantTables`, or None (K/V stored as they are).
        residual: a quantized group's :class:`~anna_core.kv_quant.residual.ResidualRing` (its newest positions in
            the serving dtype), or None.
    """

    k: list[torch.Tensor] = attrs.field(factory=list)
    v: list[torch.Tensor] = attrs.field(factory=list)
    quant: TurboQuantTables | None = None
    residual: ResidualRing | None = None

    def layer(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(k_cache, v_cache)`` of the group's ``index``-th owning layer."""
        return self.k[index], self.v[index]


@attrs.define
class StateCache:
    """The device tensors of the recurrent cache group.

    Attributes:
        conv: per layer of the group ``[num_slots + 1, C, W-1]`` in the serving dtype.
        recurrent: per layer ``[num_slots + 1, H_v, K, V]`` float32. The last slot is the scratch slot.
    """

    conv: list[torch.Tensor] = attrs.field(factory=list)
    recurrent: list[torch.Tensor] = attrs.field(factory=list)


@attrs.define
class ModelCaches:
    """Device tensors of all cache groups, allocated by the engine from the model's :class:`CacheSpec`.

    Attributes:
        block_size: tokens per KV block (every attention group).
        groups: per cache group of the spec, in its order: :class:`AttentionCache` or :class:`StateCache`.
        num_slots: the state slots the caches were sized for (the engine's: ``max_num_seqs`` plus the scratch slot,
            :func:`~anna_core.engine.cache_allocator.scratch_slot`), also where no group holds per-slot state (a
            model may keep its own per-slot tables, and a padded graph row must not write a sequence's); 0: unknown.
    """

    block_size: int
    groups: list[AttentionCache | StateCache] = attrs.field(factory=list)
    num_slots: int = 0

    def attention(self, group: int) -> AttentionCache:
        """Group ``group``'s tensors.

        Raises:
            AnnaError: that group is not an attention group.
        """
        return self._group(group, AttentionCache, "an attention")

    def state(self, group: int) -> StateCache:
        """Group ``group``'s tensors.

        Raises:
            AnnaError: that group is not the recurrent group.
        """
        return self._group(group, StateCache, "a recurrent")

    def _group(self, group: int, kind: type, what: str):
        cache = self.groups[group]
        if not isinstance(cache, kind):
            raise AnnaError(f"cache group {group} is not {what} group")
        return cache

    @property
    def state_caches(self) -> list[StateCache]:
        """The recurrent group's tensors (a list of zero or one)."""
        return [c for c in self.groups if isinstance(c, StateCache)]

    def kv_pairs(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """``(k_cache, v_cache)`` of every owning layer of every attention group, in group order."""
        return [pair for _, c in self.attention_caches for pair in zip(c.k, c.v)]

    @property
    def attention_caches(self) -> list[tuple[int, AttentionCache]]:
        """``(group index, tensors)`` of every attention group."""
        return [(i, c) for i, c in enumerate(self.groups) if isinstance(c, AttentionCache)]


@attrs.frozen
class ModelCapabilities:
    """What a model declares it supports beyond the :class:`CausalLM` contract (all off by default).

    Attributes:
        padded_prefill: padding rows of a one-sequence prefill (``ForwardBatch.num_valid``) change none
            of its state (:mod:`anna_core.layers.padding`), so the runner may capture its prefills as
            graphs (:mod:`anna_core.engine.prefill_graphs`).
        state_checkpoints: its recurrent layers take ``ForwardBatch.checkpoints``
            (:mod:`anna_core.layers.state_checkpoints`), so prefills need not be cut at snapshot boundaries.
        modalities: the media it encodes (:data:`anna_core.multimodal.MODALITIES`: ``"image"``, ``"video"``,
            ``"audio"``); non-empty requires ``encode`` and ``hidden_size`` (:class:`CausalLM`), and its
            forward pass splices ``ForwardBatch.embeds`` (:func:`anna_core.layers.media.splice_media`).
        position_rows: rows of ``ForwardBatch.positions`` (1: ``[T]``; M-RoPE: 3, ``[3, T]``).
        graph_capture: its steps may be captured as device graphs (decode and prefill). False for a model
            whose forward pass reads device values on the host, e.g. one with offloaded experts
            (:mod:`anna_core.layers.expert_offload`): the runner then runs every step eagerly. On by default.
        quantized_kv: its attention layers write and read K/V only through
            :class:`~anna_core.layers.attention.PagedAttention` (or take its fused write only where
            :meth:`~anna_core.layers.attention.PagedAttention.quantized` is False), so the engine may quantize its
            attention groups (``--kv-cache-quantization``, :mod:`anna_core.kv_quant`).
        side_outputs: each step leaves, per sequence, a value besides its sampled token (e.g. a speech model's
            other codebooks of a frame): the runner gathers ``gather_side_outputs(state_slots)`` (:class:`CausalLM`)
            of every sequence that sampled, right after the step on the device (inside a captured decode graph), and
            copies it to the host with the sampled ids (``ModelRunnerOutput.side_outputs``, or the pending ids of a
            step launched ahead: :class:`~anna_core.engine.graph_staging.PendingIds`); the engine hands each row out
            with its token (``RequestOutput.side_outputs``), so such steps overlap like any other under asynchronous
            scheduling. The engine keeps each request's side outputs (``Request.side_outputs``) and hands them to the
            model in every eager step (``ForwardBatch.side_outputs``).
        recompute_holds_last: a generated token's next input depends on the step that consumes it, not on its id
            alone (a speech talker's frame: the code predictor fills its other codebooks from the hidden state that
            chose the token), so one pass cannot recompute the last generated token together with the one before
            it. A request preempted by recompute then recomputes up to the token before its last (its side outputs
            give the model those tokens' inputs) without sampling, and gets its last token back, not reported
            again, to decode in its next step (:attr:`~anna_core.engine.request.Request.held_token`). Under
            asynchronous scheduling a step with a request holding its token is not launched ahead, and a request
            preempted while its newest token is still pending drops that token (and its side output) and holds the
            one before: it is computed again after the recompute.
        prompt_state: it keeps per-sequence state of its own that a prompt's media set when its first chunk runs
            (a speech talker's text fed with each generated token, its repetition penalty and ``min_tokens``, by state
            slot) through ``start_prompts(prompts)`` (:class:`CausalLM`), which the runner calls before the forward
            pass of every step that computes prompts' first chunks, whatever the step's path: so the forward pass
            itself reads no host data for them and a prefill graph, whose capture never sees a request, replays it.
        compiled_decode: it has ``compile_decode(caches, compile_fn) -> bool``, which makes its forward pass
            run a one-sequence, one-token decode step through one compiled function (True when it did; False
            when the model or caches do not allow it). The runner calls it at set-up on the CPU when
            ``compile_mode`` is not ``"none"`` (where no device graph removes the per-op cost).
        topk_head: it has ``compute_topk(hidden, k) -> (values, indices, logsumexp)``: its LM head's ``k`` largest
            logits per row through the ``lm_head_topk`` op (the logits ``compute_logits`` would give, without the
            ``[N, vocab]`` tensor), so the runner may take the fused top-k head for steps whose requests need no
            more (:mod:`anna_core.engine.topk_head`). False for a tensor-parallel rank (its head is a shard).
        greedy_head: it has ``compute_greedy(hidden) -> ids``: per row the column of the largest logit
            ``compute_logits`` would give (the first among equal ones, as ``torch.argmax``), possibly without the
            ``[N, vocab]`` logits (e.g. a soft-capped head's ``linear_soft_cap_argmax`` op); the captured decode
            step's greedy mode takes it (:class:`~anna_core.engine.cuda_graphs.DecodeGraphs`). False for a
            tensor-parallel rank.
    """

    padded_prefill: bool = False
    state_checkpoints: bool = False
    modalities: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    position_rows: int = 1
    graph_capture: bool = True
    quantized_kv: bool = False
    side_outputs: bool = False
    recompute_holds_last: bool = False
    prompt_state: bool = False
    compiled_decode: bool = False
    topk_head: bool = False
    greedy_head: bool = False


class CausalLM(Protocol):
    """The protocol a family's model (a ``torch.nn.Module``) implements."""

    cache_spec: CacheSpec
    """The model's cache groups (:mod:`anna_core.cache_spec`)."""
    capabilities: ModelCapabilities
    vocab_size: int
    """Rows of the LM head (the logits width): token ids ``>= vocab_size`` are rejected before a step
    (prompt ids, ``logit_bias`` keys)."""

    def forward(self, batch: ForwardBatch, caches: ModelCaches) -> torch.Tensor:
        """Hidden states ``[T, hidden]`` after the final norm, for every token of ``batch``."""

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits ``[N, vocab]`` float32 for hidden rows ``[N, hidden]``."""

    # Models whose capabilities declare ``modalities`` also have:
    #   hidden_size: int -- the width of the token embeddings that encoder outputs replace.
    #   def encode(self, items: list[MediaItem]) -> list[torch.Tensor]:
    #       the encoder output of each medium, ``[item.length, hidden_size]`` on the model's device
    #       (any float dtype; cast to the embeddings' dtype when spliced).
    # Models whose capabilities declare ``topk_head`` also have:
    #   def compute_topk(self, hidden: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    #       hidden ``[N, hidden]`` -> ``lm_head_topk``'s ``(values [N, k] float32, indices [N, k] int64,
    #       logsumexp [N] float32)`` of the logits ``compute_logits`` gives.
    # Models whose capabilities declare ``greedy_head`` also have:
    #   def compute_greedy(self, hidden: torch.Tensor) -> torch.Tensor:
    #       hidden ``[N, hidden]`` -> ``[N]`` int64: ``argmax`` of each row of the logits ``compute_logits`` gives
    #       (the first of equal largest values); device ops only (captured in decode graphs, no host read).
    # Models whose capabilities declare ``side_outputs`` also have:
    #   def gather_side_outputs(self, state_slots: torch.Tensor) -> torch.Tensor:
    #       state_slots ``[n]`` int64 on the device -> ``[n, ...]``: what the step just run left for the sequence in
    #       each slot, row ``i`` for ``state_slots[i]``; device ops only (captured in decode graphs, no host read).
    # Models whose capabilities declare ``prompt_state`` also have:
    #   def start_prompts(self, prompts: list[PromptStart]) -> None:
    #       bind each prompt's state (:class:`~anna_core.engine.forward_batch.PromptStart`: its state slot and media)
    #       before the step's forward pass, by device copies queued ahead of it (no host read); raises AnnaError for
    #       a prompt it cannot serve (the step's prompts fail, as for an error of the forward pass).


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
        tokenizer: the checkpoint's tokenizer (None for token-id-only dummy loads).
        generation: checkpoint generation defaults.
        max_model_len: the checkpoint's context limit (``max_position_embeddings``).
        family: family name (``"qwen35"``).
        dtype: the serving dtype.
        device: the device.
        expert_store: the :class:`~anna_core.layers.expert_offload.ExpertStore` of a model whose experts are
            offloaded (its cache counters reach ``/healthz`` and ``anna bench``), else None.
        processor: the family's :class:`~anna_core.multimodal.MediaProcessor` of a model that takes media (it turns
            a prompt's ids and decoded media into expanded ids and :class:`~anna_core.multimodal.MultiModalInputs`),
            else None.
        parallel: the :class:`anna_core.distributed.ParallelState` of a model loaded as one rank's shard
            (``load_model(parallel=...)``), else None.
    """

    model: CausalLM
    tokenizer: Tokenizer | None
    generation: GenerationDefaults
    max_model_len: int
    family: str
    dtype: torch.dtype
    device: torch.device
    expert_store: Any = None
    processor: Any = None
    parallel: Any = None


_REQUIRED = ("cache_spec", "capabilities", "vocab_size", "forward", "compute_logits")


def check_model(model: object) -> None:
    """Check that ``model`` declares what :class:`CausalLM` requires (once, when an engine is built).

    Raises:
        AnnaError: a required attribute is missing or of the wrong type.
    """
    missing = [name for name in _REQUIRED if not hasattr(model, name)]
    if missing:
        raise AnnaError(f"{type(model).__name__} does not implement anna_core.model.CausalLM: missing {missing}")
    if not isinstance(model.cache_spec, CacheSpec):
        raise AnnaError(f"{type(model).__name__}.cache_spec must be an anna_core.model.CacheSpec")
    if not isinstance(model.capabilities, ModelCapabilities):
        raise AnnaError(f"{type(model).__name__}.capabilities must be an anna_core.model.ModelCapabilities")
    if not isinstance(model.vocab_size, int) or model.vocab_size < 1:
        raise AnnaError(f"{type(model).__name__}.vocab_size must be a positive int, got {model.vocab_size!r}")
    if model.capabilities.state_checkpoints and model.cache_spec.recurrent is None:
        raise AnnaError(f"{type(model).__name__} declares state_checkpoints but has no recurrent cache group")
    caps = model.capabilities
    unknown = sorted(set(caps.modalities) - set(MODALITIES))
    if unknown:
        raise AnnaError(f"{type(model).__name__} declares unknown modalities {unknown} (known: {list(MODALITIES)})")
    if caps.modalities and not (callable(getattr(model, "encode", None))
                                and isinstance(getattr(model, "hidden_size", None), int)):
        raise AnnaError(f"{type(model).__name__} declares modalities {list(caps.modalities)} but lacks "
                        "encode(items) or an int hidden_size")
    if caps.side_outputs and not callable(getattr(model, "gather_side_outputs", None)):
        raise AnnaError(f"{type(model).__name__} declares side_outputs but lacks gather_side_outputs(state_slots)")
    if caps.prompt_state and not callable(getattr(model, "start_prompts", None)):
        raise AnnaError(f"{type(model).__name__} declares prompt_state but lacks start_prompts(prompts)")
    if not isinstance(caps.position_rows, int) or caps.position_rows < 1:
        raise AnnaError(f"{type(model).__name__}.capabilities.position_rows must be a positive int")
