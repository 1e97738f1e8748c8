"""Stop strings over streamed text: matched across token boundaries, never leaked.

Text that could be the beginning of a stop string is held back until the next tokens show whether
it is one; on a match the text ends right before the stop string (or right after it with
``include_stop_str_in_output``). Stop strings apply once ``min_tokens`` tokens were generated.
"""

from __future__ import annotations

from anna_core.engine.sampling_params import SamplingParams


class StopStringChecker:
    """Filters one request's text deltas.

    Args:
        params: the request's sampling params (``stop``, ``include_stop_str_in_output``,
            ``min_tokens``).
    """

    def __init__(self, params: SamplingParams):
        self.stops = list(params.stop)
        self.include = params.include_stop_str_in_output
        self.min_tokens = params.min_tokens
        self._held = ""

    def feed(self, delta: str, num_output_tokens: int) -> tuple[str, str | None]:
        """Add new text.

        Args:
            delta: text decoded this step.
            num_output_tokens: tokens generated so far, including this step's.

        Returns:
            ``(text safe to emit now, matched stop string or None)``. After a match the request
            must end; the text past the stop string is dropped.
        """
        text = self._held + delta
        self._held = ""
        if not self.stops or num_output_tokens <= self.min_tokens:
            return text, None
        best: tuple[int, str] | None = None
        for stop in self.stops:
            idx = text.find(stop)
            if idx >= 0 and (best is None or idx < best[0]):
                best = (idx, stop)
        if best is not None:
            idx, stop = best
            return text[:idx + len(stop) if self.include else idx], stop
        hold = self._partial_len(text)
        self._held = text[len(text) - hold:] if hold else ""
        return text[:len(text) - hold], None

    def flush(self) -> str:
        """Release held-back text (the request ended for another reason)."""
        text, self._held = self._held, ""
        return text

    def _partial_len(self, text: str) -> int:
        """Length of the longest suffix of ``text`` that is a proper prefix of a stop string."""
        best = 0
        for stop in self.stops:
            for k in range(min(len(stop) - 1, len(text)), best, -1):
                if text.endswith(stop[:k]):
                    best = k
                    break
        return best
