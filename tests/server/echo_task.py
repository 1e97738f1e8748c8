"""A test-only family whose task is not ``generate``: the ``echo`` task answers ``POST /v1/echo`` with
the text reversed. Plugins register it by hand (``EchoFamilyPlugin`` + ``EchoTaskPlugin``); it is not an
installed entry point. The loader reads no weights: ``config.json`` with ``model_type`` =
:data:`MODEL_TYPE` is the whole checkpoint."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from anna_core.hookspecs import hookimpl
from anna_core.registry import ModelFamilySpec, TaskSpec
from anna_core.server.prepare import check_servable
from anna_core.server.state import ServerState
from litestar import post

MODEL_TYPE = "anna_echo_test"
FAMILY = ModelFamilySpec(name="echo_test", loader="tests.server.echo_task:load", model_types=(MODEL_TYPE,),
                         tasks=("echo",), distribution="anna-echo-test")
TASK = TaskSpec(name="echo", engine="tests.server.echo_task:build", serving="tests.server.echo_task:start",
                routes="tests.server.echo_task:ROUTES", description="text reversed", distribution="anna-echo-test")


class Reverser:
    """The family's "model": reverses text."""

    def __call__(self, text: str) -> str:
        return text[::-1]


def load(source: Any, *, device: Any, dtype: Any, load_format: str, kernels: Any, chat_template: str | None = None):
    from anna_core.model import GenerationDefaults, LoadedModel

    return LoadedModel(model=Reverser(), tokenizer=None, generation=GenerationDefaults(), max_model_len=0,
                       family=FAMILY.name, dtype=dtype, device=device)


class EchoEngine:
    """The task's synchronous engine."""

    max_model_len = 0

    def __init__(self, model: Reverser, warmed_up: bool):
        self.model = model
        self.warmed_up = warmed_up

    def run(self, text: str) -> str:
        return self.model(text)


def build(loaded: Any, config: Any, runner: Any) -> EchoEngine:
    return EchoEngine(loaded.model, warmed_up=runner is not None)


class EchoClient:
    """What the routes talk to (``server.engine``)."""

    metrics = None

    def __init__(self, engine: EchoEngine):
        self.engine = engine
        self.served = 0
        self.stopped: bool | None = None

    def stats(self) -> dict[str, Any]:
        return {"served": self.served, "warmed_up": self.engine.warmed_up}

    async def echo(self, text: str) -> str:
        self.served += 1
        return self.engine.run(text)

    async def shutdown(self, drain: bool = True) -> None:
        self.stopped = drain


def start(engine: EchoEngine) -> EchoClient:
    return EchoClient(engine)


@post("/v1/echo", status_code=200)
async def echo(data: dict[str, Any], server: ServerState) -> dict[str, Any]:
    check_servable(server, data.get("model"))
    return {"text": await server.engine.echo(str(data.get("text", ""))), "model": server.model_name}


ROUTES = [echo]


class EchoFamilyPlugin:
    @hookimpl
    def register_model_families(self, register):
        register(FAMILY)


class EchoTaskPlugin:
    @hookimpl
    def register_tasks(self, register):
        register(TASK)


def register_echo(pm: Any, *, task: bool = True) -> Any:
    """Register the echo family (and, with ``task``, its task) into ``pm``; returns ``pm``."""
    pm.register(EchoFamilyPlugin(), name="anna_echo_family")
    if task:
        pm.register(EchoTaskPlugin(), name="anna_echo_task")
    return pm


@contextlib.contextmanager
def echo_registered(pm: Any, *, task: bool = True) -> Iterator[Any]:
    """``register_echo`` for the duration of a ``with`` block (e.g. into the process's plugin manager)."""
    register_echo(pm, task=task)
    try:
        yield pm
    finally:
        for name in ("anna_echo_family", "anna_echo_task"):
            if pm.get_plugin(name) is not None:
                pm.unregister(name=name)


def write_checkpoint(path: Path) -> Path:
    """A folder the echo family serves: just a ``config.json``."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"model_type": MODEL_TYPE, "architectures": ["AnnaEchoTest"]}))
    return path
