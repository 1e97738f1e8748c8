"""Logging for the ``anna`` commands: human-readable text or one JSON object per line."""

from __future__ import annotations

import json
import logging
import sys
import time

LEVELS = ("debug", "info", "warning", "error")


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``ts`` (ISO 8601, UTC), ``level``, ``logger``, ``message``
    (and ``exception`` with the formatted traceback, when there is one)."""

    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"
        out = {"ts": ts, "level": record.levelname.lower(), "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def configure_logging(level: str = "info", fmt: str = "text") -> None:
    """Send all log records at ``level`` or above to stderr, as ``fmt`` (``"text"`` or ``"json"``).

    Raises:
        ValueError: unknown level or format.
    """
    if level not in LEVELS:
        raise ValueError(f"unknown log level {level!r}; use one of {', '.join(LEVELS)}")
    if fmt not in ("text", "json"):
        raise ValueError(f"unknown log format {fmt!r}; use text or json")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json"
                         else logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):  # let uvicorn's records reach our handler
        logging.getLogger(name).handlers.clear()
        logging.getLogger(name).propagate = True
