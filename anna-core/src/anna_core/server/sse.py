"""Server-sent events framing for streamed completions.

Each event is one ``data: <compact JSON>\\n\\n`` frame; a stream ends with ``data: [DONE]\\n\\n``
(OpenAI's convention). Text stays UTF-8 (no ``\\uXXXX`` escapes), so a frame always holds
whole characters: the engine's detokenizer only emits complete code points. The exceptions are
U+0085, U+2028 and U+2029, written ``\\u0085`` ... : SSE ends lines only at CR and LF, but readers
built on ``str.splitlines`` (httpx's ``iter_lines`` / ``aiter_lines``) end a line at them too and
would cut the frame's JSON in two.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from litestar.response import Stream

DONE = b"data: [DONE]\n\n"
MEDIA_TYPE = "text/event-stream"


# Line breaks to str.splitlines that JSON leaves raw (it escapes the ones below U+0020 itself).
_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def sse_event(payload: dict[str, Any]) -> bytes:
    """One ``data:`` frame holding ``payload`` as compact JSON (on one line for every line reader)."""
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).translate(_LINE_BREAKS)
    return b"data: " + text.encode() + b"\n\n"


def sse_response(events: AsyncIterator[bytes]) -> Stream:
    """A streaming response over already-framed events.

    litestar cancels the iteration when the client disconnects, so ``events`` should release
    its resources (abort the engine request) in a ``finally`` block.
    """
    return Stream(
        events,
        media_type=MEDIA_TYPE,
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
