"""Health routes: ``GET /health`` (for load balancers) and ``GET /healthz`` (for people).

``/health`` answers 200 ``{"status": "ready"}`` only while requests can be served, else 503 with
the status (``loading``, ``failed``, ``draining`` or ``degraded``: the engine stopped taking requests after
repeated step failures or a lost device, :mod:`anna_core.engine.faults`; ``error`` says why). ``/healthz`` always answers 200 with what
the server runs: model, family, task, device, dtype, memory, uptime, chosen kernels, what each layer kind's
weights run in (``weights``: ``{"linear": "int4-gptq", "lm_head": "bfloat16"}``, a MoE model adding ``"experts"``:
``"int4"`` under ``--expert-quant int4``; :func:`anna_core.layers.wq_linear.weight_kinds`;
null before the model has loaded), engine stats and the
serving metrics (TTFT / ITL percentiles, tokens/s, prefix-cache hit rate, preemptions, 429s), and ``degraded``
(why the engine stopped taking requests, or null; ``engine.step_failures`` and ``engine.memory_admission`` have
the counts: ``docs/memory-admission.md``). The
``generate`` task's engine stats also say how steps run, family-neutral: ``paged_kv``, ``block_size``,
``prefix_caching`` and ``graphs`` (decode and prefill graphs captured or why not; see
:meth:`anna_core.engine.llm_engine.LLMEngine.stats`; the fields are listed in
``docs/openai-compatibility.md``, *Health*).
``/metrics`` gives the same figures in Prometheus text format. A 503 ``loading`` carries
``Retry-After``; ``max_model_len`` is null until the model has loaded. When the server has an API
key, ``/healthz`` shows the model path (``model_dir``) and the memory figures only to callers that
send it (others get null / ``{}``); ``/health`` never needs it.
"""

from __future__ import annotations

import logging
from typing import Any

from litestar import Request, Response, get

from anna_core.server.auth import is_authorized
from anna_core.server.errors import LOADING_RETRY_AFTER_S
from anna_core.server.state import ServerState

logger = logging.getLogger("anna.server")


@get("/health", sync_to_thread=False)
def health(server: ServerState) -> Response:
    status = server.status
    body: dict[str, Any] = {"status": status}
    if server.load_error or server.degraded:
        body["error"] = server.load_error or server.degraded
    headers = {"Retry-After": str(LOADING_RETRY_AFTER_S)} if status == "loading" else None
    return Response(body, status_code=200 if status == "ready" else 503, headers=headers)


def _memory(device_name: str | None) -> dict[str, int]:
    if not device_name:
        return {}
    try:
        import torch

        from anna_core.device import memory_stats

        return memory_stats(torch.device(device_name))
    except Exception:  # health output must not fail because a statistic is unavailable
        logger.debug("memory statistics unavailable for %s", device_name, exc_info=True)
        return {}


def _engine_stats(server: ServerState) -> dict[str, Any]:
    if server.engine is None:
        return {}
    try:
        return dict(server.engine.stats())
    except Exception:
        logger.debug("engine stats unavailable", exc_info=True)
        return {}


@get("/healthz", sync_to_thread=False)
def healthz(request: Request, server: ServerState) -> dict[str, Any]:
    detail = is_authorized(request.scope, server.api_key)
    info = server.info
    kernels = info.get("kernels", {})
    if callable(kernels):  # chosen lazily, as the model first calls each op
        kernels = kernels()
    return {
        "status": server.status,
        "model": server.model_name,
        "model_dir": info.get("model_dir") if detail else None,
        "family": info.get("family"),
        "task": info.get("task"),
        "device": info.get("device"),
        "dtype": info.get("dtype"),
        "max_model_len": server.known_max_model_len,
        "memory": _memory(info.get("device")) if detail else {},
        "uptime_s": round(server.uptime_s, 3),
        "load_s": info.get("load_s"),
        "kernels": kernels,
        "weights": info.get("weights"),
        "in_flight": server.in_flight,
        "engine": _engine_stats(server),
        "metrics": _metrics(server).snapshot() if _metrics(server) is not None else None,
        "degraded": server.degraded,
        "error": server.load_error or server.degraded,
    }


def _metrics(server: ServerState) -> Any:
    """The engine's :class:`~anna_core.metrics.EngineMetrics`, or None before the model is loaded."""
    return getattr(server.engine, "metrics", None) if server.engine is not None else None


@get("/metrics", sync_to_thread=False)
def metrics(server: ServerState) -> Response:
    """Prometheus exposition of the engine's metrics (empty while the model loads).

    The ``Content-Type`` header is set whole: given as ``media_type``, litestar would append a
    second ``charset`` to the one the Prometheus type already has, which Prometheus 3 rejects.
    """
    from anna_core.metrics import PROMETHEUS_CONTENT_TYPE

    engine_metrics = _metrics(server)
    body = engine_metrics.prometheus_text() if engine_metrics is not None else b""
    return Response(body, headers={"content-type": PROMETHEUS_CONTENT_TYPE}, status_code=200)


ROUTES = [health, healthz, metrics]
