"""How many tokens a step may compute: its token budgets and each request's chunk (pure Python, no torch).

The scheduler (:mod:`anna_core.engine.scheduler`) asks :class:`StepBudget` for a step's prefill and decode
budgets, and for the tokens of one request that the step computes from a given position: capped by the
budget left, ``prefill_chunk_size`` (or, when unset, the KV room that leaves a free block to each running
sequence) and the recurrent group's snapshot boundaries. Media are not counted here: the scheduler cuts a
chunk before a medium whose encoder output does not fit afterwards (:mod:`anna_core.engine.media_schedule`).
"""

from __future__ import annotations

from anna_core.engine.cache_manager import CacheManager
from anna_core.engine.config import EngineConfig
from anna_core.engine.request import Request


def remaining(request: Request) -> int:
    """Tokens of ``request`` not computed yet (1: its next step is a decode)."""
    return request.num_tokens - request.num_computed_tokens


class StepBudget:
    """A step's token budgets and the chunk each request computes in it.

    Args:
        config: the scheduler knobs (``max_prefill_tokens`` set, ``max_decode_tokens``, ``dynamic_token_budget``,
            ``prefill_chunk_size``, ``snapshot_interval``).
        kv: every cache group's bookkeeping (free blocks, block size).
        capture_snapshots: the recurrent group's state is snapshotted at every ``snapshot_interval`` prompt tokens.
        checkpoints_in_pass: those snapshots are taken inside a prefill pass, so a chunk may span boundaries.
    """

    def __init__(self, config: EngineConfig, kv: CacheManager, *, capture_snapshots: bool, checkpoints_in_pass: bool):
        self.config = config
        self.kv = kv
        self.capture_snapshots = capture_snapshots
        self.checkpoints_in_pass = checkpoints_in_pass

    def budgets(self, running: list[Request]) -> tuple[int, int]:
        """This step's (prefill token budget, decode read budget; 0 = unlimited) with ``running`` requests.

        With ``dynamic_token_budget`` the prefill budget is scaled by ``min(1, 2 * free / total)``
        KV blocks and, when ``max_decode_tokens`` is set, by ``max(0.25, 1 - read / max)`` where
        ``read`` is what the running decodes read; it never drops below one block.
        """
        cfg = self.config
        prefill, decode = cfg.max_prefill_tokens, cfg.max_decode_tokens
        if cfg.dynamic_token_budget:
            scale = min(1.0, 2.0 * self.kv.free_fraction())
            if decode:
                read = sum(r.num_computed_tokens + 1 for r in running if remaining(r) == 1)
                scale *= max(0.25, 1.0 - read / decode)
            prefill = max(self.kv.block_size, int(prefill * scale))
        return prefill, decode

    def chunk(self, request: Request, budget: int, start: int, num_running: int) -> int:
        """Tokens of ``request`` to compute this step from ``start`` under ``budget`` with ``num_running``
        running sequences (before any cut for media).

        With ``prefill_chunk_size`` unset, the chunk leaves a free block for each running sequence (its next
        decode), at least one block. While snapshots are captured: a chunk that starts at a boundary and
        snapshots inside the pass spans the following boundaries, and a budget cut inside the prompt ends at
        one (the next chunk starts there); any other chunk ends at the next boundary.
        """
        n = min(request.num_tokens - start, budget)
        if self.config.prefill_chunk_size:
            n = min(n, self.config.prefill_chunk_size)
        else:
            n = min(n, self.kv.chunk_room(num_running))
        if self.capture_snapshots:
            interval, p = self.config.snapshot_interval, request.num_prompt_tokens
            if self.checkpoints_in_pass and start % interval == 0:
                if start + n < min(p, request.num_tokens) and n >= interval:
                    n -= n % interval
            else:
                boundary = (start // interval + 1) * interval
                if boundary <= p and start + n > boundary:
                    n = boundary - start
        return n
