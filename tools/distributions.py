"""Anna's distributions and their tests: the one table ``noxfile.py`` (``nox -s dist``) and ``tools/dist_check.py``
(the CI check run by ``tools/test.sh``) both read.

A distribution is a folder with a ``pyproject.toml``: ``anna-*/`` at the top level and ``examples/*/``. What it
depends on among Anna's distributions is read from its declared ``dependencies``, never listed here. Standard
library only (it runs before anything is installed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]

# Test folders of each distribution (its whole suite: `nox -s dist`).
TEST_DIRS: dict[str, tuple[str, ...]] = {
    "anna-core": ("tests/core",),
    "anna-qwen35": ("tests/qwen35", "tests/qwen35_moe", "tests/qwen35_vl", "tests/qwen3"),
    "anna-gemma4": ("tests/gemma4", "tests/gemma3"),
    "anna-cli": ("tests/cli", "tests/plugins"),  # tests/plugins: a plugin made by `anna plugins new`, end to end
    "anna-llama": ("tests/llama",),
    "anna-xpu-kernels": ("tests/xpu_kernels",),
    "anna-audio": ("tests/audio", "tests/qwen3_asr"),
}
# A few seconds of each suite (pytest node ids): what tools/dist_check.py runs once the distribution installed alone.
SMOKE_TESTS: dict[str, tuple[str, ...]] = {
    "anna-core": ("tests/core/test_plugin_fixtures.py", "tests/core/test_cache_groups_family.py",
                  "tests/core/test_docs.py"),
    "anna-qwen35": ("tests/qwen35/test_qwen35_plugin.py",),
    "anna-gemma4": ("tests/gemma4/test_gemma4_loading.py::test_the_family_offers_a_tiny_checkpoint",
                    "tests/gemma3/test_gemma3_parity.py::test_the_family_offers_a_tiny_checkpoint"),
    "anna-cli": ("tests/cli/test_plugins_new.py", "tests/cli/test_tutorial_docs.py"),
    "anna-llama": ("tests/llama/test_llama_tiny.py::test_the_family_offers_a_tiny_checkpoint",),
    "anna-xpu-kernels": ("tests/xpu_kernels/test_kernel_cache.py", "tests/xpu_kernels/test_kernel_conformance.py"),
    "anna-audio": ("tests/audio/test_audio_decode.py::test_each_container_decodes_to_16k_mono",
                   "tests/qwen3_asr/test_qwen3_asr_conformance.py::test_the_family_offers_a_tiny_checkpoint"),
}
# Distributions a distribution's tests use as fixtures, installed after it installed alone (anna-core's tests use
# its own test family).
TEST_FIXTURES: dict[str, tuple[str, ...]] = {
    "anna-qwen35": ("anna-llama", "anna-cli"),  # a family without expert offload; tests/qwen35_vl serves over HTTP
    "anna-gemma4": ("anna-qwen35",),
    "anna-cli": ("anna-qwen35", "anna-xpu-kernels"),  # `anna plugins` lists the Triton kernels' devices
    "anna-llama": ("anna-cli",),  # the --weight-quant flag
    "anna-xpu-kernels": ("anna-qwen35", "anna-gemma4", "anna-audio"),  # anna-audio: the TTS code predictor fused
    "anna-audio": ("anna-cli",),  # anna serve / anna transcribe of the transcribe task
}


@dataclass(frozen=True)
class Distribution:
    """One installable distribution.

    Attributes:
        name: its project name (``anna-qwen35``).
        path: its folder.
        module: its import name (the one package under ``src/``).
        requires: the Anna distributions its ``dependencies`` name.
        entry_points: its ``anna`` entry-point names.
        scripts: its console scripts.
    """

    name: str
    path: Path
    module: str
    requires: tuple[str, ...]
    entry_points: tuple[str, ...]
    scripts: tuple[str, ...]

    @property
    def test_dirs(self) -> tuple[str, ...]:
        return TEST_DIRS.get(self.name, ())

    @property
    def smoke_tests(self) -> tuple[str, ...]:
        return SMOKE_TESTS.get(self.name, ())

    @property
    def test_fixtures(self) -> tuple[str, ...]:
        return TEST_FIXTURES.get(self.name, ())


def _read(path: Path) -> Distribution:
    project = tomllib.loads((path / "pyproject.toml").read_text())["project"]
    names = [re.match(r"[A-Za-z0-9._-]+", req).group(0).lower() for req in project.get("dependencies", [])]
    packages = [p.name for p in sorted((path / "src").iterdir()) if (p / "__init__.py").is_file()]
    if len(packages) != 1:
        raise ValueError(f"{path}: expected one package under src/, found {packages}")
    return Distribution(name=project["name"], path=path, module=packages[0],
                        requires=tuple(n for n in names if n.startswith("anna-")),
                        entry_points=tuple(project.get("entry-points", {}).get("anna", {})),
                        scripts=tuple(project.get("scripts", {})))


def distributions() -> dict[str, Distribution]:
    """Every distribution of the checkout by name, in a stable order (top level, then ``examples/``)."""
    folders = [p.parent for p in sorted(ROOT.glob("anna-*/pyproject.toml"))]
    folders += [p.parent for p in sorted(ROOT.glob("examples/*/pyproject.toml"))]
    found = {d.name: d for d in map(_read, folders)}
    unknown = sorted((set(TEST_DIRS) | set(SMOKE_TESTS) | set(TEST_FIXTURES)) - set(found))
    if unknown:
        raise ValueError(f"tools/distributions.py names distributions that do not exist: {unknown}")
    return found


def with_requirements(name: str, dists: dict[str, Distribution] | None = None) -> list[Distribution]:
    """``name`` and every Anna distribution it requires, transitively: requirements first, ``name`` last."""
    dists = dists or distributions()
    order: list[Distribution] = []

    def visit(n: str, chain: tuple[str, ...]) -> None:
        if n in chain:
            raise ValueError(f"dependency cycle: {' -> '.join((*chain, n))}")
        if n not in dists:
            what = f"{chain[-1]} requires {n}, which is" if chain else f"{n} is"
            raise ValueError(f"{what} not a distribution of this checkout (distributions: {sorted(dists)})")
        for req in dists[n].requires:
            visit(req, (*chain, n))
        if dists[n] not in order:
            order.append(dists[n])

    visit(name, ())
    return order


def owned_test_dirs() -> list[str]:
    """Every test folder some distribution owns (``TEST_DIRS``), relative to the checkout."""
    return sorted({d for dirs in TEST_DIRS.values() for d in dirs})


if __name__ == "__main__":  # python tools/distributions.py --pytest-ignores: the owned folders as pytest --ignore options
    import sys

    if sys.argv[1:] != ["--pytest-ignores"]:
        sys.exit("usage: python tools/distributions.py --pytest-ignores")
    print(" ".join(f"--ignore={d}" for d in owned_test_dirs()))
