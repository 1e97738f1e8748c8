"""Local-server hygiene: which ``Host`` and ``Origin`` values a server answers.

A server bound to a loopback address is reachable from the user's own browser, so any web page
could try it: by DNS rebinding (a page's own domain made to resolve to 127.0.0.1, so its requests
carry ``Host: evil.example``) or by a cross-site request (which carries the page's ``Origin``).
Like Ollama's and llama.cpp's servers, Anna therefore serves:

- on a loopback bind (``127.0.0.1``, ``localhost``, ``::1``): only requests whose ``Host`` is
  ``localhost``, ``127.0.0.1`` or ``[::1]`` (any port) or one of ``--allowed-hosts``; a request
  without ``Host`` (HTTP/1.0, not a browser) is served;
- on any other bind (``0.0.0.0``, ``::``, a LAN address): any ``Host``, unless ``--allowed-hosts``
  is given, which then applies as on loopback (``*`` allows every host);
- whatever the bind: no request carrying an ``Origin`` header (browsers add it to cross-site
  requests) unless it is one of ``--allowed-origins`` (none by default; ``*`` allows every origin).

Refusals are 403s in OpenAI's error shape (``code`` ``host_not_allowed`` / ``origin_not_allowed``),
sent by :class:`anna_core.server.app.RequestGuardMiddleware`. JSON routes also require
``Content-Type: application/json`` (:func:`anna_core.server.request_body.json_body`), so a form or
``text/plain`` POST -- which a browser sends cross-site without asking -- is never parsed as JSON.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

LOOPBACK_HOSTS = frozenset(("localhost", "127.0.0.1", "::1"))
"""``Host`` names (without port) always served when a Host check applies."""

_LOOPBACK_BINDS = frozenset(("localhost", "127.0.0.1", "::1"))


def is_loopback_bind(bind_host: str) -> bool:
    """Whether ``bind_host`` (``--host``) listens on loopback only."""
    host = bind_host.strip("[]").lower()
    return host in _LOOPBACK_BINDS or host.startswith("127.")


def host_name(header: str) -> str:
    """The host of a ``Host`` header value, lower-case, without port, brackets or trailing dot
    (``[::1]:8000`` -> ``::1``, ``LocalHost:80`` -> ``localhost``)."""
    value = header.strip().lower()
    if value.startswith("["):
        value = value[1:].split("]", 1)[0]
    elif value.count(":") == 1:
        value = value.split(":", 1)[0]
    return value.rstrip(".")


@attrs.frozen
class RequestGuard:
    """The Host / Origin rules of one server.

    Attributes:
        allowed_hosts: host names served (without port; compared lower-case), or None: any.
        allowed_origins: ``Origin`` values served (``scheme://host[:port]``); ``"*"``: any.
    """

    allowed_hosts: frozenset[str] | None = None
    allowed_origins: frozenset[str] = frozenset()

    @classmethod
    def for_bind(cls, bind_host: str, allowed_hosts: Iterable[str] = (),
                 allowed_origins: Iterable[str] = ()) -> RequestGuard:
        """The rules for a server bound to ``bind_host`` (see the module doc)."""
        hosts = {host_name(h) if h != "*" else "*" for h in allowed_hosts if h.strip()}
        origins = frozenset(o.strip().rstrip("/").lower() for o in allowed_origins if o.strip())
        if "*" in hosts or (not hosts and not is_loopback_bind(bind_host)):
            return cls(None, origins)
        return cls(frozenset(hosts | LOOPBACK_HOSTS), origins)

    def host_allowed(self, header: str | None) -> bool:
        if self.allowed_hosts is None or header is None:
            return True
        return host_name(header) in self.allowed_hosts

    def origin_allowed(self, header: str | None) -> bool:
        if header is None or "*" in self.allowed_origins:
            return True
        return header.strip().rstrip("/").lower() in self.allowed_origins
