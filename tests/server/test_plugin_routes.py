"""Routes registered through ``register_routes`` are mounted and receive the ServerState."""

from __future__ import annotations

from anna_core.hookspecs import hookimpl
from anna_core.plugins import make_plugin_manager
from anna_core.registry import RouteSpec
from anna_core.server.app import create_app
from anna_core.server.state import ServerState
from litestar import get
from litestar.testing import TestClient


@get("/v1/echo-model", sync_to_thread=False)
def echo_model(server: ServerState) -> dict:
    return {"model": server.model_name}


HANDLERS = [echo_model]


class RoutesPlugin:
    @hookimpl
    def register_routes(self, register):
        register(RouteSpec(name="echo", handlers="tests.server.test_plugin_routes:HANDLERS"))


def test_plugin_routes_are_mounted_with_the_state(state):
    pm = make_plugin_manager(load_entry_points=False)
    pm.register(RoutesPlugin(), name="echo-plugin")
    with TestClient(create_app(state, pm=pm)) as client:
        r = client.get("/v1/echo-model", headers={"X-Request-Id": "p1"})
    assert r.status_code == 200 and r.json() == {"model": state.model_name}
    assert r.headers["x-request-id"] == "p1"
