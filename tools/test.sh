#!/usr/bin/env bash
# Install Anna with its dev tools (tools/install.sh), lint with ruff, run the whole test suite, then check that
# each distribution installs alone (tools/dist_check.py: a minute or two; ANNA_DIST_CHECK=0 skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
ANNA_DEV=1 bash tools/install.sh
venv="${ANNA_VENV:-.venv}"
"$venv/bin/ruff" check --config .ci/ruff.toml .
"$venv/bin/python" -m pytest tests "$@"
if [ "${ANNA_DIST_CHECK:-1}" != "0" ]; then
  "$venv/bin/python" tools/dist_check.py
fi
