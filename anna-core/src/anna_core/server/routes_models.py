"""``GET /v1/models`` and ``GET /v1/models/{model}``: the served model, whatever its task (mounted by
every server next to the health routes)."""

from __future__ import annotations

from typing import Any

from litestar import get

from anna_core.server import responses
from anna_core.server.errors import ModelNotFoundError
from anna_core.server.state import ServerState


@get("/v1/models", sync_to_thread=False)
def list_models(server: ServerState) -> dict[str, Any]:
    """The served model, with its ``max_model_len`` (null while loading)."""
    return responses.model_list_body(server.model_name, int(server.started_at), server.known_max_model_len)


@get("/v1/models/{model:path}", sync_to_thread=False)
def retrieve_model(model: str, server: ServerState) -> dict[str, Any]:
    """OpenAI's ``models.retrieve``: the served model's object (ids may contain ``/``).

    Raises:
        ModelNotFoundError: another id (HTTP 404 ``model_not_found``).
    """
    requested = model[1:] if model.startswith("/") else model  # a path parameter keeps its leading slash
    if requested != server.model_name:
        raise ModelNotFoundError(requested, server.model_name)
    return responses.model_body(server.model_name, int(server.started_at), server.known_max_model_len)


ROUTES = [list_models, retrieve_model]
