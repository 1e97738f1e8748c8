"""tools/distributions.py, the table ``nox -s dist`` and tools/dist_check.py share, matches the checkout: every
distribution's folders and smoke tests exist, and its Anna requirements are its declared dependencies."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from distributions import TEST_DIRS, distributions, with_requirements  # noqa: E402


def test_every_distribution_of_the_checkout_is_listed():
    dists = distributions()
    assert {"anna-core", "anna-qwen35", "anna-gemma4", "anna-cli", "anna-llama", "anna-xpu-kernels"} <= set(dists)
    assert dists["anna-llama"].path == ROOT / "examples" / "anna-llama"
    assert dists["anna-qwen35"].module == "anna_qwen35" and dists["anna-qwen35"].entry_points == ("anna_qwen35",)
    assert dists["anna-cli"].scripts == ("anna",)


def test_test_folders_and_smoke_tests_exist_and_belong_to_their_distribution():
    for dist in distributions().values():
        for folder in dist.test_dirs:
            assert (ROOT / folder).is_dir(), (dist.name, folder)
        for node in dist.smoke_tests:
            path = node.split("::")[0]
            assert (ROOT / path).is_file(), (dist.name, node)
            assert any(path.startswith(folder + "/") for folder in dist.test_dirs), (dist.name, node)
    assert set(TEST_DIRS) <= set(distributions())


def test_requirements_come_from_the_declared_dependencies_requirements_first():
    dists = distributions()
    assert dists["anna-core"].requires == ()
    assert dists["anna-llama"].requires == ("anna-core",)  # examples/anna-llama/pyproject.toml: anna-core==0.1.0
    assert [d.name for d in with_requirements("anna-cli", dists)] == ["anna-core", "anna-cli"]
    with pytest.raises(ValueError, match="anna-nothing is not a distribution"):
        with_requirements("anna-nothing", dists)


UNOWNED = {"bench", "integration", "server", "soak"}  # run in .venv by tools/test.sh (need several distributions)


def test_every_test_folder_is_owned_or_runs_in_the_shared_environment():
    """A folder that is neither in TEST_DIRS nor known to run in .venv would still run (tools/test.sh ignores only
    owned folders), but a new folder should be placed on purpose."""
    from distributions import owned_test_dirs

    tests = Path(__file__).resolve().parent
    folders = {p.name for p in tests.iterdir() if p.is_dir() and any(p.glob("test_*.py"))}
    owned = {Path(d).name for d in owned_test_dirs()}
    assert folders == owned | UNOWNED, (sorted(folders - owned - UNOWNED), sorted((owned | UNOWNED) - folders))
