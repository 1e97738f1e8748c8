"""The API key check (``Authorization: Bearer <key>``), shared by the auth middleware and ``/healthz``."""

from __future__ import annotations

import hmac

from litestar.datastructures import MutableScopeHeaders
from litestar.types import Scope


def is_authorized(scope: Scope, key: str | None) -> bool:
    """Whether the request carries ``Authorization: Bearer <key>`` (always True without a key);
    the comparison takes constant time."""
    if not key:
        return True
    sent = MutableScopeHeaders(scope).get("authorization") or ""  # type: ignore[arg-type]
    scheme, _, token = sent.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), key.encode())
