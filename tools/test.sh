#!/usr/bin/env bash
# Install Anna with its dev tools (tools/install.sh), lint with ruff and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
ANNA_DEV=1 bash tools/install.sh
venv="${ANNA_VENV:-.venv}"
"$venv/bin/ruff" check --config .ci/ruff.toml .
exec "$venv/bin/python" -m pytest tests "$@"
