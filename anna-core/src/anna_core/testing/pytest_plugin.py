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
        ``flags`` become options (``max_model_len=512`` -> ``--max-model-len 512``, ``True`` -> a bare flag;
        ``False`` is refused: pass the negative flag in ``args``).
        Every server it started is stopped after the test. A directory's own conftest may shadow it.

Per-test fixtures of the plugin seam (nothing a test registers outlives it):
    anna_plugin_manager: a fresh plugin manager with the installed ``anna`` entry points loaded (honouring
        ``ANNA_LOAD_PLUGINS``), the one ``register_plugin`` and ``tiny_checkpoint`` use; pass it on as ``pm=``
        (``load_model``, ``model_families``, ``describe_plugins``, ``KernelRegistry.from_plugins``).
    register_plugin: ``register(plugin, name=None) -> str`` registers a plugin (a module or an object with
        ``@hookimpl`` methods) on ``anna_plugin_manager`` and returns its name; unregistered after the test.
    tiny_checkpoint: ``build(family, **overrides) -> Path`` writes a tiny random checkpoint of the family named
        ``family`` (its ``ModelFamilySpec.tiny_checkpoint`` builder, given ``overrides``) into a new folder
        under ``tmp_path`` and returns the folder.

The conformance suites are base classes, not fixtures: :mod:`anna_core.testing.conformance`
(``FamilyConformance``, ``KernelConformance``); the family suite's parser checks are plain functions too
(:mod:`anna_core.testing.parser_streams`). anna-core's own test family (``CacheGroupsLM`` loaded from a
folder) is :mod:`anna_core.testing.cache_groups_family`.
"""

from __future__ import annotations

import itertools
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
def anna_plugin_manager() -> Any:
    from anna_core.plugins import make_plugin_manager, plugin_allow_list

    return make_plugin_manager(plugin_allow_list())


@pytest.fixture
def register_plugin(anna_plugin_manager: Any) -> Iterator[Callable[..., str]]:
    registered: list[Any] = []

    def register(plugin: Any, name: str | None = None) -> str:
        registered_name = anna_plugin_manager.register(plugin, name=name)
        if registered_name is None:
            raise ValueError(f"register_plugin: the plugin name {name!r} is blocked in this plugin manager")
        registered.append(plugin)
        return registered_name

    yield register
    for plugin in reversed(registered):
        if anna_plugin_manager.is_registered(plugin):
            anna_plugin_manager.unregister(plugin)


@pytest.fixture
def tiny_checkpoint(tmp_path: Path, anna_plugin_manager: Any) -> Callable[..., Path]:
    from anna_core.testing.tiny import write_tiny_checkpoint

    count = itertools.count()

    def build(family: str, **overrides: Any) -> Path:
        return write_tiny_checkpoint(family, tmp_path / f"tiny-{family}-{next(count)}", pm=anna_plugin_manager,
                                     **overrides)

    return build


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
            elif value is False:
                raise ValueError(f"live_server: {name}=False has no flag form; pass the negative flag itself as an "
                                 "argument, e.g. live_server(model_dir, '--disable-prefix-caching')")
            elif value is not None:
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
