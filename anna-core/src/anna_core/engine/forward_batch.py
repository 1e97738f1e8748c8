"""The objects that cross the engine -> model boundary each step: the batch of tokens (:class:`ForwardBatch`) and, for
a model that keeps per-sequence state of its own, the prompts that start (:class:`PromptStart`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import torch

if TYPE_CHECKING:  # the layers import this module
    from anna_core.layers.state_checkpoints import StateCheckpoints


@attrs.define
class GroupTable:
    """One attention cache group's share of a batch.

    Attributes:
        block_tables: ``[B, max_blocks]`` int32 block ids per sequence, indexed by ``position // block_size``
            (entries the sequence does not hold, e.g. blocks behind a sliding window, and padding hold
            the group's scratch block).
        slot_mapping: ``[T]`` int64 flat cache slot (``block * block_size + offset``) of each token,
            where its K/V are written.
    """

    block_tables: torch.Tensor
    slot_mapping: torch.Tensor


@attrs.define
class ForwardBatch:
    """A flattened, variable-length batch of tokens for one forward pass.

    ``B`` sequences contribute ``T`` tokens in total; sequence ``i`` owns rows
    ``cu_seqlens[i]:cu_seqlens[i+1]``. Prefill chunks and single-token decodes may be mixed.
    All tensors live on the model's device.

    Attributes:
        input_ids: ``[T]`` int64 token ids.
        positions: ``[T]`` int64 absolute positions (0-based) of each token in its sequence; ``[R, T]`` for
            a model whose capabilities declare ``position_rows = R > 1`` (M-RoPE: temporal / height / width
            rows, see :mod:`anna_core.multimodal`).
        cu_seqlens: ``[B+1]`` int32 query offsets into the flattened tokens.
        seq_lens: ``[B]`` int32 context length of each sequence *after* this step (cached + new).
        tables: per cache group of the model's :class:`~anna_core.cache_spec.CacheSpec`, in its order, a
            :class:`GroupTable` (attention groups) or None (the recurrent group, addressed by ``state_slots``).
        state_slots: ``[B]`` int64 state slot of each sequence (the recurrent group's slots; every
            sequence has one, so models without recurrent layers may key per-sequence data by it).
        logits_indices: ``[N]`` int64 rows of the hidden states whose logits are needed (the
            last token of each sequence that samples this step).
        query_lens: host copy of the per-sequence query lengths (``list[int]``, length ``B``).
        context_lens: host copy of ``seq_lens`` (``list[int]``).
        is_decode: every sequence contributes exactly one token (decode-only step).
        num_valid: ``[1]`` int64, or None. Set only for a single-sequence prefill padded to a captured
            length (:mod:`anna_core.engine.prefill_graphs`): rows ``num_valid..T-1`` are padding. Their
            K/V go to their own positions of each block table (padded with the scratch block) through
            ``slot_mapping``; layers with recurrent state must make them change no state
            (:mod:`anna_core.layers.padding`). None: every row is a real token.
        checkpoints: recurrent-state snapshots to take inside this prefill pass
            (:mod:`anna_core.layers.state_checkpoints`; only for models whose capabilities declare ``state_checkpoints``),
            or None.
        embeds: ``[T, hidden]`` encoder outputs to splice in place of the token embeddings of the rows
            ``embeds_mask`` marks (media placeholders; :func:`anna_core.layers.media.splice_media`), or None
            (no medium in this step). Rows the mask does not mark hold anything.
        embeds_mask: ``[T]`` bool, True at the rows whose embedding comes from ``embeds``; None with ``embeds``.
        uniform_positions: with ``[R, T]`` positions, True when every row is known to be equal (a decode step: a
            generated token has one position in every row; a batch whose tokens carry no media positions), so a
            model may rotate by row 0 alone (``[T]`` rotary, e.g. a fused kernel that takes 1-D positions) with
            the same result. False: the rows may differ.
        media: per sequence, its request's :class:`~anna_core.multimodal.MultiModalInputs` (Python objects), or None
            for a text request: per-request inputs a family's processor put in its media items' ``data`` that the
            model reads beyond the encoder outputs (e.g. a speech model's text fed with each generated token).
            Host data only: a captured graph does not see it.
        side_outputs: for a model whose capabilities declare ``side_outputs``, per sequence, the side outputs its
            request has received so far (:attr:`~anna_core.engine.request.Request.side_outputs`: entry ``k`` is what
            the step that produced output ``k`` left), e.g. what a recompute after preemption rebuilds its generated
            tokens' inputs from; empty otherwise, and in captured graphs. Host data only.
    """

    input_ids: torch.Tensor
    positions: torch.Tensor
    cu_seqlens: torch.Tensor
    seq_lens: torch.Tensor
    tables: list[GroupTable | None]
    state_slots: torch.Tensor
    logits_indices: torch.Tensor
    query_lens: list[int]
    context_lens: list[int]
    is_decode: bool
    num_valid: torch.Tensor | None = None
    checkpoints: StateCheckpoints | None = None
    embeds: torch.Tensor | None = None
    embeds_mask: torch.Tensor | None = None
    uniform_positions: bool = False
    media: list[Any] = attrs.field(factory=list)
    side_outputs: list[list[Any]] = attrs.field(factory=list)

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def num_seqs(self) -> int:
        return len(self.query_lens)


@attrs.frozen
class PromptStart:
    """A prompt whose first chunk the step computes, handed to a model that declares ``prompt_state``
    (:class:`~anna_core.model.ModelCapabilities`) before the step's forward pass, in every path (eager, a prefill
    graph's replay, a split step): what the model binds to the sequence's state slot from the prompt's media, e.g. a
    speech talker's text fed with its generated tokens and its sampling controls. Host data only.

    Attributes:
        state_slot: the sequence's state slot (its ``ForwardBatch.state_slots`` entry).
        media: its request's :class:`~anna_core.multimodal.MultiModalInputs` (its ``ForwardBatch.media`` entry), or
            None for a prompt without media (e.g. text ids alone).
    """

    state_slot: int
    media: Any
