"""The encoder side of a step's schedule: its encoder budget and which media outputs each request holds (pure Python).

A chunk covering placeholders of a medium whose encoder output is not cached gets it encoded in its step
(``SchedulerOutput.encoder_inputs``), within the step's ``max_encoder_tokens`` and the encoder cache's room
(:mod:`anna_core.engine.encoder_cache`); a medium that does not fit cuts the chunk before its first
placeholder (a chunk cut to nothing waits for the next step). The output stays cached while a request's
chunks are inside the medium, so a later chunk reads it instead of encoding again (a medium the prompt
repeats further on is encoded again there unless another request still holds it).
"""

from __future__ import annotations

from anna_core.engine.encoder_cache import EncoderCacheManager
from anna_core.engine.request import Request
from anna_core.engine.sched_output import ScheduledSeq, SchedulerOutput


class MediaSchedule:
    """The step's encoder budget over an encoder cache.

    Args:
        cache: the encoder outputs the runner holds (:class:`~anna_core.engine.encoder_cache.EncoderCacheManager`).
    """

    def __init__(self, cache: EncoderCacheManager):
        self.cache = cache
        self.budget = 0  # encoder-output rows this step may still encode

    def start_step(self, max_encoder_tokens: int) -> None:
        """A new step may encode ``max_encoder_tokens`` rows."""
        self.budget = max_encoder_tokens

    def limit(self, request: Request, start: int, n: int) -> int:
        """``n`` cut before the first medium of tokens ``start .. start+n-1`` whose encoder output is not
        cached and does not fit this step's encoder budget or the encoder cache (0: nothing fits)."""
        mm = request.multimodal
        if mm is None or not mm.items:
            return n
        budget, room, seen = self.budget, self.cache.num_free, set()
        for item in mm.items_in(start, start + n):
            h = item.key
            if h in self.cache or h in seen:
                continue
            if item.length > budget or item.length > room:
                return max(0, item.offset - start)
            budget -= item.length
            room -= item.length
            seen.add(h)
        return n

    def acquire(self, seq: ScheduledSeq, out: SchedulerOutput) -> None:
        """Hold the encoder outputs ``seq``'s chunk reads; media new to the cache are encoded this step
        (appended to ``out.encoder_inputs``)."""
        rid = seq.request_id
        for item in seq.media:
            if self.cache.holds(rid, item.key):
                continue
            if self.cache.acquire(rid, item.key, item.length):
                out.encoder_inputs.append(item)
                self.budget -= item.length

    def release_done(self, request: Request) -> None:
        """Release the encoder outputs ``request`` holds but is not in the middle of: a medium it computed
        past is released even when a later placeholder range repeats it (that one acquires it again), so
        held outputs never block the request's own next medium."""
        mm = request.multimodal
        if mm is None:
            return
        done = request.num_computed_tokens
        for h in self.cache.held_by(request.request_id):
            if not any(m.offset < done < m.end for m in mm.items if m.key == h):
                self.cache.release(request.request_id, h)
