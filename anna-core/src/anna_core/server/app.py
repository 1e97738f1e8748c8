"""The litestar application over one ServerState: the served task's routes (``generate``: the OpenAI
routes), the routes every server has (``/health``, ``/healthz``, ``/metrics``, ``/v1/models``) and
plugin routes.

- Every response (errors and unknown routes included) carries ``X-Request-Id``: the client's
  own when it sent one, else a fresh id.
- While the server drains, ``/v1/*`` requests get a 503 in OpenAI's error shape; requests
  already running are counted in ``ServerState.in_flight`` until their last byte is sent.
- Routes from plugins (``register_routes``) are mounted as given; they may declare a
  ``server: ServerState`` parameter to receive the state.
- With ``ServerState.api_key`` set, ``/v1/*``, ``/tokenize`` and ``/detokenize`` need
  ``Authorization: Bearer <key>`` (else 401 in OpenAI's shape); ``/health`` and ``/healthz``
  stay open (``/healthz`` leaves out the model path and memory figures unless the key is sent).
- With ``ServerState.request_guard`` set, requests with a ``Host`` or ``Origin`` it does not allow
  get a 403 before anything else (:mod:`anna_core.server.request_guard`).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import pluggy
from litestar import Litestar
from litestar.datastructures import MutableScopeHeaders
from litestar.di import Provide
from litestar.middleware import DefineMiddleware
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from anna_core.registry import TaskSpec, resolve
from anna_core.server import routes_health, routes_models
from anna_core.server.auth import is_authorized
from anna_core.server.errors import error_body, exception_handlers
from anna_core.server.state import ServerState

logger = logging.getLogger("anna.server")

REQUEST_ID_HEADER = "x-request-id"
_SCOPE_KEY = "anna_request_id"


def _request_id(scope: Scope) -> str:
    """The client's ``X-Request-Id`` (if sane) or a new one, cached in the scope."""
    rid = scope.get(_SCOPE_KEY)  # type: ignore[call-overload]
    if rid is None:
        sent = MutableScopeHeaders(scope).get(REQUEST_ID_HEADER)  # type: ignore[arg-type]
        rid = sent if sent and len(sent) <= 200 and sent.isprintable() else uuid.uuid4().hex
        scope[_SCOPE_KEY] = rid  # type: ignore[literal-required]
    return rid


async def _add_request_id(message: Message, scope: Scope) -> None:
    if message["type"] == "http.response.start":
        MutableScopeHeaders.from_message(message)[REQUEST_ID_HEADER] = _request_id(scope)


_PROTECTED_EXACT = frozenset(("/tokenize", "/detokenize"))


async def _send_json(send: Send, scope: Scope, status: int, payload: dict[str, Any],
                     extra: list[tuple[bytes, bytes]] = ()) -> None:
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (REQUEST_ID_HEADER.encode(), _request_id(scope).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class RequestGuardMiddleware:
    """Refuses (403) requests whose ``Host`` or ``Origin`` the server's
    :class:`~anna_core.server.request_guard.RequestGuard` does not allow."""

    def __init__(self, app: ASGIApp, state: ServerState):
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        guard = self.state.request_guard
        if guard is not None and scope["type"] == "http":
            headers = MutableScopeHeaders(scope)  # type: ignore[arg-type]
            host, origin = headers.get("host"), headers.get("origin")
            if not guard.host_allowed(host):
                await _send_json(send, scope, 403, error_body(
                    f"this server does not answer requests for host {host!r}; start it with --allowed-hosts to "
                    "allow it", "invalid_request_error", None, "host_not_allowed"))
                return
            if not guard.origin_allowed(origin):
                await _send_json(send, scope, 403, error_body(
                    f"this server does not answer cross-origin requests from {origin!r}; start it with "
                    "--allowed-origins to allow it", "invalid_request_error", None, "origin_not_allowed"))
                return
        await self.app(scope, receive, send)


class AuthMiddleware:
    """``Authorization: Bearer <api_key>`` on the API routes when the server has a key."""

    def __init__(self, app: ASGIApp, state: ServerState):
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        key = self.state.api_key
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if key and (path.startswith("/v1/") or path in _PROTECTED_EXACT):
            sent = MutableScopeHeaders(scope).get("authorization") or ""  # type: ignore[arg-type]
            if not is_authorized(scope, key):
                message = ("Incorrect API key provided." if sent else
                           "Missing API key: send 'Authorization: Bearer <key>'.")
                await _send_json(send, scope, 401, error_body(message, "invalid_request_error", None,
                                                              "invalid_api_key"),
                                 [(b"www-authenticate", b"Bearer")])
                return
        await self.app(scope, receive, send)


class AdmissionMiddleware:
    """Refuses ``/v1/*`` requests while draining and counts the ones in flight."""

    def __init__(self, app: ASGIApp, state: ServerState):
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        if self.state.draining:
            await _send_json(send, scope, 503, error_body("the server is shutting down and takes no new requests",
                                                          "server_error", None, "service_unavailable"))
            return
        self.state.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.state.in_flight -= 1


ALWAYS_ROUTES = [*routes_health.ROUTES, *routes_models.ROUTES]
"""Handlers every server mounts, whatever its task."""


def _handlers(target: str) -> list[Any]:
    resolved = resolve(target)
    return list(resolved) if isinstance(resolved, (list, tuple)) else [resolved]


def _plugin_handlers(pm: pluggy.PluginManager | None) -> list[Any]:
    from anna_core import plugins

    handlers: list[Any] = []
    for spec in plugins.routes(pm):
        handlers.extend(_handlers(spec.handlers))
        logger.info("mounted routes of plugin %r", spec.name)
    return handlers


def create_app(
    state: ServerState,
    *,
    pm: pluggy.PluginManager | None = None,
    task: TaskSpec | None = None,
    on_startup: Sequence[Callable[..., Any]] = (),
    on_shutdown: Sequence[Callable[..., Any]] = (),
) -> Litestar:
    """Build the app serving ``state``.

    Args:
        state: the server state shared by all handlers.
        pm: plugin manager whose ``register_routes`` handlers are mounted (default: the process's).
        task: the served task, whose ``routes`` are mounted next to :data:`ALWAYS_ROUTES` (default:
            anna-core's ``generate``, the OpenAI routes).
        on_startup / on_shutdown: litestar lifespan hooks (``anna serve`` loads and stops the
            engine with them).

    Raises:
        ImportError / AttributeError: the task's or a plugin's lazy routes do not resolve.
    """
    if task is None:
        from anna_core.builtin_plugin import GENERATE_TASK

        task = GENERATE_TASK
    return Litestar(
        route_handlers=[*_handlers(task.routes), *ALWAYS_ROUTES, *_plugin_handlers(pm)],
        dependencies={"server": Provide(lambda: state, sync_to_thread=False, use_cache=True)},
        exception_handlers=exception_handlers(),
        middleware=[DefineMiddleware(RequestGuardMiddleware, state=state), DefineMiddleware(AuthMiddleware, state=state),
                    DefineMiddleware(AdmissionMiddleware, state=state)],
        before_send=[_add_request_id],
        on_startup=list(on_startup),
        on_shutdown=list(on_shutdown),
        openapi_config=None,
        logging_config=None,
        debug=False,
    )
