#!/usr/bin/env bash
# Install Anna with its dev tools (tools/install.sh), lint with ruff, then test.
#   bash tools/test.sh            every test once: the tests no distribution owns (server, integration, bench, soak)
#                                 in .venv, then each distribution installed alone in a fresh virtualenv over .venv's
#                                 third-party packages, running its own test folders there (tools/dist_check.py
#                                 --all-tests; tools/distributions.py says which folders are whose)
#   bash tools/test.sh ARGS...    the whole suite in .venv with pytest ARGS (e.g. -x, -k), then the quick install
#                                 check of every distribution (its smoke tests)
#   ANNA_DIST_CHECK=0             the whole suite in .venv only, no per-distribution virtualenvs
set -euo pipefail
cd "$(dirname "$0")/.."
ANNA_DEV=1 bash tools/install.sh
venv="${ANNA_VENV:-.venv}"
"$venv/bin/ruff" check --config .ci/ruff.toml .
if [ "${ANNA_DIST_CHECK:-1}" = "0" ]; then
  exec "$venv/bin/python" -m pytest tests "$@"
fi
if [ "$#" -eq 0 ]; then
  ignores=$("$venv/bin/python" tools/distributions.py --pytest-ignores)  # (set -e stops here if it fails)
  read -ra ignore_args <<< "$ignores"
  "$venv/bin/python" -m pytest tests "${ignore_args[@]}"
  exec "$venv/bin/python" tools/dist_check.py --all-tests
fi
"$venv/bin/python" -m pytest tests "$@"
exec "$venv/bin/python" tools/dist_check.py
