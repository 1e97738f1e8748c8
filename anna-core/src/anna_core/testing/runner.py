"""A minimal model driver for tests and plugin authors: caches, hand-built batches, greedy decode.

Not the engine: no scheduler, no sampling, no prefix cache. Sequence ``i`` of a call gets state
slot ``i`` and the consecutive KV blocks ``[i*M, (i+1)*M)``.
"""

from __future__ import annotations

from typing import Any

import torch

from anna_core.cache_spec import CacheSpec
from anna_core.engine.cache_allocator import zeroed_caches as allocate_caches
from anna_core.engine.forward_batch import ForwardBatch, GroupTable
from anna_core.kv_quant.layout import TurboQuantLayout
from anna_core.model import ModelCaches


def build_batch(chunks: list[tuple[list[int], int]], *, block_size: int, blocks_per_seq: int,
                device: torch.device, spec: CacheSpec, slots: list[int] | None = None) -> ForwardBatch:
    """A :class:`ForwardBatch` for sequences ``i`` feeding ``tokens`` from position ``start``.

    Args:
        chunks: per sequence ``(tokens, start)``: new token ids and the number already cached.
        block_size: tokens per KV block.
        blocks_per_seq: KV blocks reserved per sequence (consecutive, the same in every attention group;
            a sliding-window group keeps every block, its attention reads only the window).
        device: where the tensors go.
        spec: the model's cache groups (one table per attention group).
        slots: state slot per sequence (default ``0..B-1``); sequence ``i``'s blocks follow its slot.

    Raises:
        ValueError: a sequence would outgrow its blocks, or a chunk is empty.
    """
    slots = list(range(len(chunks))) if slots is None else slots
    ids, positions, slot_mapping, cu, seq_lens, tables = [], [], [], [0], [], []
    for (tokens, start), slot in zip(chunks, slots):
        if not tokens:
            raise ValueError("every sequence in a batch needs at least one new token")
        end = start + len(tokens)
        if end > block_size * blocks_per_seq:
            raise ValueError(f"sequence of {end} tokens exceeds {blocks_per_seq} blocks of {block_size}")
        table = [slot * blocks_per_seq + j for j in range(blocks_per_seq)]
        ids += tokens
        positions += list(range(start, end))
        slot_mapping += [table[p // block_size] * block_size + p % block_size for p in range(start, end)]
        cu.append(cu[-1] + len(tokens))
        seq_lens.append(end)
        tables.append(table)

    def t(data, dtype):
        return torch.tensor(data, dtype=dtype, device=device)

    query_lens = [len(c[0]) for c in chunks]
    group_tables: list[GroupTable | None] = [None] * len(spec.groups)
    for g in spec.attention_groups:
        group_tables[g] = GroupTable(block_tables=t(tables, torch.int32), slot_mapping=t(slot_mapping, torch.int64))
    return ForwardBatch(
        input_ids=t(ids, torch.int64), positions=t(positions, torch.int64), cu_seqlens=t(cu, torch.int32),
        seq_lens=t(seq_lens, torch.int32), tables=group_tables, state_slots=t(slots, torch.int64),
        logits_indices=t([c - 1 for c in cu[1:]], torch.int64), query_lens=query_lens,
        context_lens=seq_lens, is_decode=all(n == 1 for n in query_lens),
    )


def _device_dtype(model: Any) -> tuple[torch.device, torch.dtype]:
    # The serving dtype is that of the weight matrices (some vectors stay float32).
    p = next((p for p in model.parameters() if p.dim() >= 2), None)
    p = p if p is not None else next(model.parameters())
    return p.device, p.dtype


def _caches_for(model: Any, num_seqs: int, max_tokens: int, block_size: int,
                kv_quant: TurboQuantLayout | None = None) -> tuple[ModelCaches, int]:
    device, dtype = _device_dtype(model)
    blocks_per_seq = -(-max_tokens // block_size)
    # one slot more than the sequences: a residual ring's writes park the rows it does not keep in its last slot
    caches = allocate_caches(model.cache_spec.with_kv_quant(kv_quant), num_blocks=num_seqs * blocks_per_seq,
                             block_size=block_size, num_slots=num_seqs + 1, device=device, dtype=dtype)
    return caches, blocks_per_seq


@torch.inference_mode()
def prefill_logits(model: Any, prompt_ids: list[int], *, chunk_size: int | None = None,
                   block_size: int = 16, kv_quant: TurboQuantLayout | None = None,
                   decode_ids: list[int] | None = None) -> torch.Tensor:
    """Float32 logits ``[T + N, vocab]`` at every prompt position (optionally prefilled in chunks; with ``kv_quant``
    over a TurboQuant cache, every position reading the quantized K/V of all positions up to its own), then at each
    of the ``N`` ``decode_ids`` fed one per decode step after the prompt (teacher-forced; None: none)."""
    device, _ = _device_dtype(model)
    decode_ids = decode_ids or []
    n = len(prompt_ids)
    caches, bps = _caches_for(model, 1, n + len(decode_ids), block_size, kv_quant)
    step = chunk_size or n
    chunks = [(prompt_ids[start:start + step], start) for start in range(0, n, step)]
    out = []
    for chunk in chunks + [([t], n + i) for i, t in enumerate(decode_ids)]:
        batch = build_batch([chunk], block_size=block_size, blocks_per_seq=bps, device=device, spec=model.cache_spec)
        out.append(model.compute_logits(model(batch, caches)))
    return torch.cat(out)


@torch.inference_mode()
def simple_greedy_batch(model: Any, prompts: list[list[int]], n: int, *, block_size: int = 16,
                        chunk_size: int | None = None) -> list[list[int]]:
    """``n`` greedy tokens for each prompt, all sequences prefilled and decoded together.

    Prefill goes in chunks of ``chunk_size`` tokens per sequence (default: whole prompts), then
    ``n - 1`` decode-only steps (``is_decode=True``). Returns the new token ids per prompt.
    """
    device, _ = _device_dtype(model)
    caches, bps = _caches_for(model, len(prompts), max(map(len, prompts)) + n, block_size)
    done = [0] * len(prompts)
    next_tok: list[int | None] = [None] * len(prompts)
    step = chunk_size or max(map(len, prompts))
    while any(d < len(p) for d, p in zip(done, prompts)):
        live = [i for i, p in enumerate(prompts) if done[i] < len(p)]
        chunks = [(prompts[i][done[i]:done[i] + step], done[i]) for i in live]
        batch = build_batch(chunks, block_size=block_size, blocks_per_seq=bps, device=device, spec=model.cache_spec,
                            slots=live)
        logits = model.compute_logits(model(batch, caches)[batch.logits_indices])
        best = logits.argmax(-1).tolist()
        for i, c, b in zip(live, chunks, best):
            done[i] += len(c[0])
            if done[i] == len(prompts[i]):
                next_tok[i] = b
    out: list[list[int]] = [[t] for t in next_tok]  # type: ignore[list-item]
    for _ in range(n - 1):
        chunks = [([seq[-1]], len(p) + len(seq) - 1) for p, seq in zip(prompts, out)]
        batch = build_batch(chunks, block_size=block_size, blocks_per_seq=bps, device=device, spec=model.cache_spec)
        logits = model.compute_logits(model(batch, caches)[batch.logits_indices])
        for seq, b in zip(out, logits.argmax(-1).tolist()):
            seq.append(b)
    return out


def simple_greedy(model: Any, prompt_ids: list[int], n: int, *, block_size: int = 16,
                  chunk_size: int | None = None) -> list[int]:
    """``n`` greedy tokens after ``prompt_ids`` (one sequence; see :func:`simple_greedy_batch`)."""
    return simple_greedy_batch(model, [prompt_ids], n, block_size=block_size, chunk_size=chunk_size)[0]
