"""The plain objects the scheduler hands the model runner and the engine each step (pure Python)."""

from __future__ import annotations

import enum
from typing import Any

import attrs

from anna_core.engine.request import Request
from anna_core.engine.state_snapshots import PromptEntry
from anna_core.multimodal import MediaItem


@attrs.define
class ScheduledSeq:
    """One sequence's share of a step.

    Attributes:
        request: the request.
        start: position of the first token computed this step (== tokens already cached).
        token_ids: the tokens computed this step (positions ``start .. start+len-1``).
        block_tables: per cache group (:class:`~anna_core.cache_spec.CacheSpec` order), the sequence's
            blocks, indexed by ``position // block_size`` and covering at least ``start + len(token_ids)``
            tokens (entries behind a sliding window are the group's null block; empty for the recurrent group).
        state_slot: the sequence's state slot (the recurrent group's).
        samples: True when this chunk reaches the end of the known tokens, so the step samples the
            sequence's next token from the logits of its last row.
        restore_snapshot: snapshot-pool index whose state is copied into ``state_slot`` before the
            step (a prefix-cache hit of a model with a recurrent group, resuming at ``start``), or None.
        capture_snapshot: the chunk ends at a snapshot boundary of the prompt; the engine copies the
            state into the snapshot pool after the step.
        capture_prompt: the chunk completes the prompt; the engine stores the state and the logits
            in the prompt cache after the step.
        checkpoints: snapshots taken inside the pass (:mod:`anna_core.layers.state_checkpoints`):
            ``(position, snapshot index, prefix key)`` of each snapshot boundary strictly inside the
            chunk, ascending; the state after ``position`` tokens goes to the index, whose entry is
            pending in the scheduler's :class:`~anna_core.engine.state_snapshots.SnapshotIndex` until the
            step is recorded.
    """

    request: Request
    start: int
    token_ids: list[int]
    block_tables: list[list[int]]
    state_slot: int
    samples: bool
    restore_snapshot: int | None = None
    capture_snapshot: bool = False
    capture_prompt: bool = False
    checkpoints: list[tuple[int, int, bytes]] = attrs.Factory(list)

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def num_new_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def context_len(self) -> int:
        """Cached plus new tokens after this step."""
        return self.start + len(self.token_ids)

    @property
    def media(self) -> list[MediaItem]:
        """The media whose placeholders this chunk covers (their encoder outputs are spliced in)."""
        mm = self.request.multimodal
        return mm.items_in(self.start, self.context_len) if mm is not None else []

    @property
    def is_fresh(self) -> bool:
        """First chunk of the sequence: its state slot must start from zeros."""
        return self.start == 0


@attrs.define
class PromptHit:
    """A request whose whole prompt is in the prompt cache: nothing is computed for it this step.

    The engine copies the entry's state into ``state_slot`` and, when the prompt ends inside a
    block, the entry's last block of each attention group into the request's own last block
    (``tail_copies``: ``(group, source block, destination block)``); then samples the first token from
    the entry's stored logits.
    """

    request: Request
    entry: PromptEntry
    state_slot: int
    block_tables: list[list[int]]
    tail_copies: list[tuple[int, int, int]]

    @property
    def request_id(self) -> str:
        return self.request.request_id


@attrs.define
class Capture:
    """A state copy the engine performs after a successful step (filled in by ``Scheduler.update``).

    Attributes:
        kind: ``"snapshot"`` (into the snapshot pool) or ``"prompt"`` (into the prompt store, with
            the request's last logits row).
        state_slot: the slot to copy from.
        index: the destination index in its pool.
        request_id: the request the state belongs to.
    """

    kind: str
    state_slot: int
    index: int
    request_id: str


@attrs.define
class SchedulerOutput:
    """What one step computes: the plain object crossing scheduler -> model runner.

    Attributes:
        seqs: scheduled sequences, in batch order (decodes, then prefill chunks).
        preempted: ids of requests preempted (back to waiting) while scheduling this step.
        num_batched_tokens: total tokens computed this step.
        prompt_hits: requests served from the prompt cache this step (not in ``seqs``).
        cache_lookups: ``(cached_tokens, prompt_tokens)`` of each first admission (hit-rate metric).
        captures: state copies to make after the step (filled in by ``Scheduler.update``).
        encoder_inputs: media to encode before this step's forward pass (each once, new to the encoder
            cache; :mod:`anna_core.engine.encoder_cache`); the chunks of ``seqs`` that cover placeholders
            read their rows from the cache.
        free_encoder_hashes: keys (:attr:`~anna_core.multimodal.MediaItem.key`) of encoder outputs nobody
            needs any more: the runner drops them before encoding ``encoder_inputs`` (which may bring one back).
    """

    seqs: list[ScheduledSeq] = attrs.field(factory=list)
    preempted: list[str] = attrs.field(factory=list)
    num_batched_tokens: int = 0
    prompt_hits: list[PromptHit] = attrs.field(factory=list)
    cache_lookups: list[tuple[int, int]] = attrs.field(factory=list)
    captures: list[Capture] = attrs.field(factory=list)
    encoder_inputs: list[MediaItem] = attrs.field(factory=list)
    free_encoder_hashes: list[bytes] = attrs.field(factory=list)

    @property
    def is_empty(self) -> bool:
        return not self.seqs and not self.prompt_hits

    @property
    def is_decode(self) -> bool:
        """Every sequence decodes one token on top of a cached context."""
        return bool(self.seqs) and all(s.num_new_tokens == 1 and s.start > 0 for s in self.seqs)


class StepPath(enum.Enum):
    """How the runner executes a step (:meth:`~anna_core.engine.model_runner.ModelRunner.plan`, the one
    place this is decided)."""

    DECODE_GRAPH = "decode_graph"
    """A captured decode graph with the sampler inside; may be launched without waiting (asynchronous
    scheduling)."""
    DECODE_LOGITS_GRAPH = "decode_logits_graph"
    """A captured decode graph of the forward pass and LM head, sampled eagerly (penalties, ``min_tokens``,
    logit bias, grammars, logprobs, or logits the step must return)."""
    PREFILL_GRAPH = "prefill_graph"
    """A captured one-sequence prefill of the prompt's length bucket, sampled eagerly."""
    SPLIT = "split"
    """Decodes through a captured decode graph, then the step's prompts through one prefill graph each or
    one eager pass (a step mixing decodes and prompt chunks, or of several fresh prompts); sampled eagerly
    except the decodes of a graph with the sampler inside."""
    EAGER = "eager"
    """The model called eagerly on the step's :class:`~anna_core.engine.forward_batch.ForwardBatch`."""


@attrs.define
class ModelRunnerOutput:
    """What one step produced: the plain object crossing model runner -> engine / scheduler.

    Attributes:
        path: how the step ran.
        sampled: request id -> sampled token of every sequence that samples (empty while ``pending``).
        pending: a launched decode step's ids in ``out.seqs`` order, still being copied to the host
            (``wait=False``; :class:`~anna_core.engine.graph_staging.PendingIds`, which also carries the step's
            side outputs), or None.
        prompt_logits: request id -> ``[V]`` float32 tensor, the last-row logits of each sequence whose
            chunk completes its prompt, for the prompt cache (``capture_prompt``; raw logits only, so none
            for requests whose logits are processed).
        side_outputs: with a model that declares ``side_outputs``, request id -> the host copy of what the step left
            for each sequence that sampled (``CausalLM.gather_side_outputs``, one row each; empty while
            ``pending``: the pending ids carry them).
    """

    path: StepPath
    sampled: dict[str, int] = attrs.field(factory=dict)
    pending: Any = None
    prompt_logits: dict[str, Any] = attrs.field(factory=dict)
    side_outputs: dict[str, Any] = attrs.field(factory=dict)
