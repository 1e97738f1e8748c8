"""Exceptions -> OpenAI-shaped JSON errors ``{"error": {"message", "type", "param", "code"}}``.

Status codes: 400 ``invalid_request_error`` (bad body, limits), 401 ``invalid_api_key``, 403
``host_not_allowed`` / ``origin_not_allowed`` (:mod:`anna_core.server.request_guard`), 404
``model_not_found``, 415 ``unsupported_media_type`` (a JSON route without ``application/json``), 429 ``rate_limit_exceeded`` with ``Retry-After`` when the engine's waiting
queue is full, 503 while the model loads (with ``Retry-After``) or the server drains, when a request would fit the
device's memory only later (``insufficient_memory``, with ``Retry-After``; one that never fits is a 400 of that
code) or the engine is degraded (``engine_degraded``) -- also when a running request fails for these reasons (the
device ran out of memory in its step, or the engine degraded meanwhile: a stream's error event carries the code) --,
500 for
anything unexpected. A 500 logs the traceback server-side and sends the client only a generic
message, never the traceback. Messages and params are made UTF-8-encodable before sending.
"""

from __future__ import annotations

import logging
from typing import Any

from litestar import Request, Response
from litestar.exceptions import HTTPException

from anna_core.errors import (
    AnnaError,
    EngineDeadError,
    EngineDegradedError,
    InvalidRequestError,
    MemoryUnavailableError,
    QueueFullError,
)

logger = logging.getLogger("anna.server")


class ModelNotFoundError(AnnaError):
    """The request names a model this server does not serve (HTTP 404)."""

    def __init__(self, requested: str, served: str):
        super().__init__(f"The model '{requested}' does not exist; this server serves '{served}'.")
        self.requested = requested


LOADING_RETRY_AFTER_S = 5
"""``Retry-After`` (seconds) of a 503 while the model loads."""


class ServiceUnavailableError(AnnaError):
    """The server cannot take requests now: the model is loading or the server drains (HTTP 503).

    Attributes:
        retry_after_s: sent as ``Retry-After`` when set (while loading; not when loading failed).
        code: the error's ``code`` (subclasses name their reason, e.g. ``server_shutdown``).
    """

    code = "service_unavailable"

    def __init__(self, message: str, retry_after_s: int | None = None):
        super().__init__(message)
        self.retry_after_s = retry_after_s


RETRYABLE_FAILURE_CODES = frozenset({"insufficient_memory", "engine_degraded"})
"""``RequestOutput.error_code`` values a failed generation answers with 503 (and ``Retry-After``), not 500."""


class GenerationFailed(AnnaError):
    """The engine ended a request with ``finish_reason == "error"`` (HTTP 500, with its message; 503 with
    ``Retry-After`` when ``code`` is one of :data:`RETRYABLE_FAILURE_CODES`: the device ran out of memory in its
    step, or the engine is degraded).

    Attributes:
        code: the output's ``error_code`` (the error body's ``code``), or None.
        retry_after_s: ``Retry-After`` seconds of a 503.
    """

    def __init__(self, message: str, code: str | None = None, retry_after_s: int = 1):
        super().__init__(message)
        self.code = code
        self.retry_after_s = retry_after_s


class UnsupportedMediaTypeError(AnnaError):
    """A JSON route got a body of another ``Content-Type`` (HTTP 415)."""


class ClientDisconnected(Exception):
    """The client went away before its (non-streamed) answer was ready; nobody reads the reply."""


async def wait_for_disconnect(request: Request) -> None:
    """Return once the client of ``request`` disconnects (a non-streamed route races its work against this, then
    aborts the work and raises :class:`ClientDisconnected`)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _encodable(text: str | None) -> str | None:
    """``text`` with anything UTF-8 cannot encode (lone surrogates) written as ``\\udXXX`` escapes."""
    if text is None:
        return None
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def error_body(message: str, type_: str, param: str | None = None, code: str | int | None = None) -> dict[str, Any]:
    """The OpenAI error object; ``message`` and ``param`` are made UTF-8-encodable, so an error
    about client text can always be sent."""
    return {"error": {"message": _encodable(message), "type": type_, "param": _encodable(param), "code": code}}


def error_response(status: int, message: str, type_: str, param: str | None = None,
                   code: str | int | None = None) -> Response:
    return Response(content=error_body(message, type_, param, code), status_code=status)


def _invalid_request(_: Request, exc: InvalidRequestError) -> Response:
    return error_response(400, str(exc), "invalid_request_error", exc.param, exc.code)


def _model_not_found(_: Request, exc: ModelNotFoundError) -> Response:
    return error_response(404, str(exc), "invalid_request_error", "model", "model_not_found")


def _unavailable(_: Request, exc: AnnaError) -> Response:
    code = getattr(exc, "code", None) or "service_unavailable"
    response = error_response(503, str(exc), "server_error", None, code)
    retry_after = getattr(exc, "retry_after_s", None)
    if retry_after is not None:
        response.headers["Retry-After"] = str(max(1, int(retry_after)))
    return response


def _queue_full(_: Request, exc: QueueFullError) -> Response:
    response = error_response(429, str(exc), "rate_limit_error", None, "rate_limit_exceeded")
    response.headers["Retry-After"] = str(max(1, int(exc.retry_after_s)))
    return response


def _unsupported_media_type(_: Request, exc: UnsupportedMediaTypeError) -> Response:
    return error_response(415, str(exc), "invalid_request_error", None, "unsupported_media_type")


def _generation_failed(request: Request, exc: GenerationFailed) -> Response:
    if exc.code in RETRYABLE_FAILURE_CODES:
        return _unavailable(request, exc)
    return error_response(500, str(exc), "server_error", None, exc.code)


def _client_disconnected(request: Request, exc: ClientDisconnected) -> Response:
    logger.info("client disconnected; aborted request %s", exc)
    return error_response(499, "client closed the request", "invalid_request_error")


def _http_exception(_: Request, exc: HTTPException) -> Response:
    status = exc.status_code
    kind = "invalid_request_error" if status < 500 else "server_error"
    return error_response(status, str(exc.detail), kind, None, None)


def _internal(request: Request, exc: Exception) -> Response:
    logger.error("internal error serving %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(500, "The server had an internal error while processing the request.", "server_error")


def exception_handlers() -> dict[type[Exception], Any]:
    """The litestar ``exception_handlers`` map (most specific class wins by MRO)."""
    return {
        InvalidRequestError: _invalid_request,
        ModelNotFoundError: _model_not_found,
        ServiceUnavailableError: _unavailable,
        EngineDeadError: _unavailable,
        EngineDegradedError: _unavailable,
        MemoryUnavailableError: _unavailable,
        QueueFullError: _queue_full,
        GenerationFailed: _generation_failed,
        UnsupportedMediaTypeError: _unsupported_media_type,
        ClientDisconnected: _client_disconnected,
        HTTPException: _http_exception,
        Exception: _internal,
    }
