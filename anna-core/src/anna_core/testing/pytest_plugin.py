"""Pytest plugin shipped to plugin authors (the ``pytest11`` entry point ``anna_core``).

Session-scoped fixtures that build tiny random checkpoints once per test session. Heavy imports
happen inside the fixtures, so loading this plugin costs nothing for unrelated test suites.

Fixtures:
    anna_tiny_qwen35_factory: ``build(**kwargs) -> Path``; builds
        :func:`anna_core.testing.checkpoints.build_tiny_qwen35` once per distinct ``kwargs``.
    anna_tiny_qwen35: the default tiny checkpoint (text layout, tied, with tokenizer and
        ``generation_config.json``) -- enough for engine and server tests.
    anna_tiny_tokenizer_dir: a folder holding only the tiny tokenizer.
    live_server: ``start(model_dir, *args, **flags) -> LiveServer``: a real ``anna serve`` of ``model_dir``
        (:mod:`anna_core.testing.live_server`; needs anna-cli) on a free loopback port, ready when returned;
        ``flags`` become options (``max_model_len=512`` -> ``--max-model-len 512``, ``True`` -> a bare flag).
        Every server it started is stopped after the test. A directory's own conftest may shadow it.

The family conformance suite is a base class, not a fixture: :mod:`anna_core.testing.conformance`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def anna_tiny_qwen35_factory(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    built: dict[tuple[tuple[str, Any], ...], Path] = {}

    def build(**kwargs: Any) -> Path:
        from anna_core.testing.checkpoints import build_tiny_qwen35

        key = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in kwargs.items()))
        if key not in built:
            built[key] = build_tiny_qwen35(tmp_path_factory.mktemp("tiny-qwen35"), **kwargs)
        return built[key]

    return build


@pytest.fixture(scope="session")
def anna_tiny_qwen35(anna_tiny_qwen35_factory: Callable[..., Path]) -> Path:
    return anna_tiny_qwen35_factory()


@pytest.fixture(scope="session")
def anna_tiny_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from anna_core.testing.checkpoints import build_tiny_tokenizer

    path = tmp_path_factory.mktemp("tiny-tokenizer")
    build_tiny_tokenizer(path)
    return path


@pytest.fixture
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Any]]:
    from anna_core.testing.live_server import start_server

    started = []

    def start(model_dir: str | Path, *args: str, **flags: Any) -> Any:
        argv = ["--model-dir", str(model_dir), *args]
        for name, value in flags.items():
            option = "--" + name.replace("_", "-")
            if value is True:
                argv.append(option)
            elif value is not False and value is not None:
                argv += [option, str(value)]
        server = start_server(argv, tmp_path_factory.mktemp("live-server"), Path(model_dir))
        started.append(server)
        return server

    yield start
    for server in started:
        try:
            server.stop(timeout=30)
        except Exception:  # noqa: BLE001 - a server that ignores SIGTERM is killed instead
            server.kill()
