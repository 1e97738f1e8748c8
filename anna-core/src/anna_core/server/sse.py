"""Server-sent events framing for streamed completions.

Each event is one ``data: <compact JSON>\\n\\n`` frame; a stream ends with ``data: [DONE]\\n\\n``
(OpenAI's convention). Text stays UTF-8 (no ``\\uXXXX`` escapes), so a frame always holds
whole characters: the engine's detokenizer only emits complete code points.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from litestar.response import Stream

DONE = b"data: [DONE]\n\n"
MEDIA_TYPE = "text/event-stream"


def sse_event(payload: dict[str, Any]) -> bytes:
    """One ``data:`` frame holding ``payload`` as compact JSON."""
    return b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


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
