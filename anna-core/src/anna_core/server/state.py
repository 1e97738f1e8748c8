"""What the HTTP server knows: the engine client, the tokenizer, limits, defaults and readiness.

One :class:`ServerState` is created per server process and handed to
:func:`anna_core.server.app.create_app`; route handlers receive it as the ``server`` dependency
(plugin routes may declare a ``server: ServerState`` parameter too). It starts not ready
(``/health`` answers 503) and becomes ready when :meth:`ServerState.set_ready` is called with a
started engine.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import AsyncIterator
from typing import Any, Protocol

import attrs

from anna_core.engine.outputs import RequestOutput
from anna_core.engine.sampling_params import SamplingParams
from anna_core.server.shutdown import StreamCutter

logger = logging.getLogger("anna.server")

MAX_WARNED_FIELDS = 32
"""Distinct unknown request field names logged one by one over a process's life; after them one
summary line says that further ones are not logged."""

# Sampling fields that a server flag or generation_config.json may default (vLLM names).
SAMPLING_DEFAULT_FIELDS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
)


class EngineClient(Protocol):
    """The part of :class:`anna_core.engine.async_engine.AsyncEngine` the ``generate`` task's routes use
    (every task's client offers ``stats``: :class:`anna_core.tasks.TaskClient`)."""

    def generate(
        self, request_id: str, prompt_token_ids: list[int], params: SamplingParams
    ) -> AsyncIterator[RequestOutput]:
        """Stream one :class:`RequestOutput` per engine step until ``finished``."""

    def abort(self, request_id: str) -> Any:
        """Stop a request early (may be sync or return an awaitable)."""

    def stats(self) -> dict[str, Any]:
        """JSON-ready engine statistics (shown on ``/healthz``)."""


@attrs.define
class ServerState:
    """Mutable per-process server state.

    Attributes:
        model_name: the name clients pass as ``model`` (``GET /v1/models`` lists it).
        engine: the served task's client (``TaskSpec.serving``'s result; ``generate``: an
            :class:`~anna_core.engine.async_engine.AsyncEngine`); None until the model has loaded.
        tokenizer: :class:`anna_core.tokenizer.Tokenizer` (None while loading or for id-only models).
        max_model_len: prompt + completion token limit per request (0 while loading; the API
            shows null then).
        eos_token_ids: the checkpoint's stop ids (informational; the engine applies them).
        checkpoint_sampling: sampling defaults from ``generation_config.json``.
        server_sampling: sampling defaults from server flags (``--temperature`` ...); they win over
            ``checkpoint_sampling``, and a request's own fields win over both.
        max_completion_tokens: ``max_tokens`` of a request that sets none (None: whatever the
            context leaves after the prompt).
        enable_thinking: server default for the chat template's ``enable_thinking`` (None: the
            template's own default).
        reasoning_parser / tool_call_parser: factories of the output parsers (``--reasoning-parser``
            / ``--tool-call-parser`` or the family's defaults); None: no parsing.
        reasoning_format: ``"deepseek"`` (reasoning in ``reasoning_content``) or ``"none"`` (inline).
        api_key: when set, ``/v1/*``, ``/tokenize`` and ``/detokenize`` require
            ``Authorization: Bearer <api_key>``.
        info: static facts for ``/healthz`` (family, task, device, dtype, kernels, ...).
        ready: the model is loaded and the engine runs.
        draining: SIGTERM received: new requests get 503, in-flight ones finish.
        load_error: why loading failed, if it did.
        in_flight: requests being served right now (maintained by the app middleware).
        started_at: ``time.time()`` at creation (uptime on ``/healthz``).
        warned_fields: unknown request fields already logged once (at most
            :data:`MAX_WARNED_FIELDS`).
        streams: ends every response in flight when the server stops before they finish
            (:mod:`anna_core.server.shutdown`).
        request_guard: the Host / Origin / Content-Type rules
            (:class:`anna_core.server.request_guard.RequestGuard`); None: no checks (tests, embedding).
        processor: the loaded model's :class:`~anna_core.multimodal.MediaProcessor` (``LoadedModel.processor``);
            None: the model takes text only, and a chat message with an image is a 400.
        media_fetcher: fetches the media requests name (:class:`anna_core.media.MediaFetcher`); by default one
            with the default :class:`~anna_core.media.MediaPolicy` (``data:`` URIs and public http(s) URLs, no
            local files).
        mm_processor_kwargs: default settings of the media processor (``--mm-processor-kwargs``); a request's own
            ``mm_processor_kwargs`` override them key by key.
        media_slots: requests whose media may be fetched and decoded at once (each holds a worker thread of the
            event loop's default executor, which every request's off-loop preparation shares); one more is
            refused with a 429 rather than queued. By default half of that executor's threads (at least 1).
    """

    model_name: str
    engine: Any = None
    tokenizer: Any = None
    max_model_len: int = 0
    eos_token_ids: list[int] = attrs.field(factory=list)
    checkpoint_sampling: dict[str, Any] = attrs.field(factory=dict)
    server_sampling: dict[str, Any] = attrs.field(factory=dict)
    max_completion_tokens: int | None = None
    enable_thinking: bool | None = None
    reasoning_parser: Any = None
    tool_call_parser: Any = None
    reasoning_format: str = "deepseek"
    api_key: str | None = None
    info: dict[str, Any] = attrs.field(factory=dict)
    ready: bool = False
    draining: bool = False
    load_error: str | None = None
    in_flight: int = 0
    started_at: float = attrs.field(factory=time.time)
    warned_fields: set[str] = attrs.field(factory=set)
    streams: Any = attrs.field(factory=StreamCutter)  # a StreamCutter (Any: litestar inspects these types)
    request_guard: Any = None
    processor: Any = None
    media_fetcher: Any = attrs.field(factory=lambda: _default_media_fetcher())
    mm_processor_kwargs: dict[str, Any] = attrs.field(factory=dict)
    media_slots: Any = attrs.field(factory=lambda: threading.BoundedSemaphore(_default_media_slots()))
    _warn_lock: Any = attrs.field(factory=threading.Lock, init=False, repr=False)
    _warnings_capped: bool = attrs.field(default=False, init=False, repr=False)

    def set_ready(
        self,
        engine: Any,
        tokenizer: Any,
        *,
        max_model_len: int,
        eos_token_ids: list[int] | None = None,
        checkpoint_sampling: dict[str, Any] | None = None,
        info: dict[str, Any] | None = None,
        processor: Any = None,
    ) -> None:
        """Attach a started engine (and the model's media processor, if it takes media) and mark the server
        ready."""
        self.engine = engine
        self.tokenizer = tokenizer
        self.processor = processor
        self.max_model_len = max_model_len
        self.eos_token_ids = list(eos_token_ids or [])
        self.checkpoint_sampling = {
            k: v for k, v in (checkpoint_sampling or {}).items() if k in SAMPLING_DEFAULT_FIELDS
        }
        if info:
            self.info.update(info)
        self.ready = True

    @property
    def degraded(self) -> str | None:
        """Why the engine is degraded (repeated step failures, a lost device: :mod:`anna_core.engine.faults`), or
        None; engine clients without a ``degraded`` attribute never are."""
        reason = getattr(self.engine, "degraded", None) if self.engine is not None else None
        return reason if isinstance(reason, str) else None

    @property
    def status(self) -> str:
        """``"ready"``, ``"loading"``, ``"draining"``, ``"degraded"`` or ``"failed"``."""
        if self.draining:
            return "draining"
        if self.load_error is not None:
            return "failed"
        if self.ready and self.degraded is not None:
            return "degraded"
        return "ready" if self.ready else "loading"

    @property
    def known_max_model_len(self) -> int | None:
        """``max_model_len`` as the API shows it: None (JSON null) until the model has loaded."""
        return self.max_model_len if self.ready and self.max_model_len > 0 else None

    @property
    def max_waiting_requests(self) -> int:
        """The engine's waiting-queue limit (``EngineConfig.max_waiting_requests`` of the
        :class:`~anna_core.engine.llm_engine.LLMEngine` behind the async engine); 0: unbounded,
        or no engine yet, or an engine client that has no such limit."""
        config = getattr(getattr(self.engine, "engine", None), "config", None)
        limit = getattr(config, "max_waiting_requests", 0)
        return limit if isinstance(limit, int) and limit > 0 else 0

    @property
    def uptime_s(self) -> float:
        return time.time() - self.started_at

    def sampling_default(self, name: str) -> Any:
        """Server flag, else checkpoint default, else None (the :class:`SamplingParams` default)."""
        if self.server_sampling.get(name) is not None:
            return self.server_sampling[name]
        return self.checkpoint_sampling.get(name)

    def warn_unknown_fields(self, names: list[str], endpoint: str) -> None:
        """Log one warning per unknown request field name over the process lifetime, for at most
        :data:`MAX_WARNED_FIELDS` names; then one line saying further names are not logged (a body
        of 20,000 made-up fields writes 33 lines, not 20,000). Safe from any thread."""
        with self._warn_lock:
            for name in names:
                if name in self.warned_fields:
                    continue
                if len(self.warned_fields) >= MAX_WARNED_FIELDS:
                    if not self._warnings_capped:
                        self._warnings_capped = True
                        logger.warning("ignoring unknown request field(s) on %s; %d distinct unknown names logged "
                                       "already, so further ones are ignored without a warning",
                                       endpoint, MAX_WARNED_FIELDS)
                    return
                self.warned_fields.add(name)
                name_shown = name if len(name) <= 100 else name[:100] + "..."
                logger.warning("ignoring unknown request field %r (first seen on %s)", name_shown, endpoint)


def _default_media_fetcher() -> Any:
    """A :class:`~anna_core.media.MediaFetcher` under the default policy (imported here: the media package pulls in
    Pillow, which a server that is never sent media need not load at import time of this module)."""
    from anna_core.media import MediaFetcher, MediaPolicy

    return MediaFetcher(MediaPolicy())


def _default_media_slots() -> int:
    """Half the threads of asyncio's default executor (``min(32, cpus + 4)``), at least 1."""
    return max(1, min(32, (os.cpu_count() or 1) + 4) // 2)
