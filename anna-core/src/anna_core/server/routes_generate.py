"""The routes of the ``generate`` task: the OpenAI text routes (:mod:`~anna_core.server.routes_openai`)
and ``/tokenize`` / ``/detokenize`` (:mod:`~anna_core.server.routes_tokenize`)."""

from anna_core.server import routes_openai, routes_tokenize

ROUTES = [*routes_openai.ROUTES, *routes_tokenize.ROUTES]
