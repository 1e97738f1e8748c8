"""Each Anna distribution installs alone and passes its tests there: the form of ``nox -s dist`` that ``tools/test.sh``
runs (``nox -s dist`` also reinstalls the third-party packages, torch included, for every distribution).

    python tools/dist_check.py [NAME ...]               # every distribution by default; its smoke tests (a minute)
    python tools/dist_check.py --all-tests [NAME ...]   # its whole test folders (what CI runs)

The third-party packages are shared: a *base* folder holds links to everything installed in this interpreter's
site-packages except Anna's own distributions, and each distribution gets a fresh virtualenv that sees the base
through a ``.pth`` file (what ``--system-site-packages`` does for a base interpreter; run from a virtualenv, that flag
would expose the system Python's packages instead). In it, for each distribution (``tools/distributions.py``):

1. ``pip install --no-index`` of the distribution by name from a wheelhouse holding a wheel of every Anna
   distribution (built once, without build isolation, from copies of the sources): pip takes only the Anna
   distributions it declares, and its declared third-party requirements must already be satisfied by the base;
2. exactly those Anna distributions are installed and importable, and no other Anna module is;
3. every module of it imports, and ``describe_plugins()`` lists its ``anna`` entry points under its name; each console script
   answers ``--help``;
4. the distributions its tests use as fixtures are installed, then its smoke tests run (``SMOKE_TESTS``), or with
   ``--all-tests`` its test folders (``TEST_DIRS``).

What it cannot prove, ``nox -s dist`` does: that its third-party requirements are declared (the base has
them all).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from distributions import ROOT, Distribution, distributions, with_requirements  # noqa: E402

CHECK = r"""
import importlib, importlib.metadata, importlib.util, json, pkgutil, sys
from anna_core.plugins import describe_plugins

name, module, expected, entry_points, others = sys.argv[1:6]
installed = sorted(d.metadata["Name"] for d in importlib.metadata.distributions() if d.metadata["Name"].startswith("anna-"))
assert installed == sorted(json.loads(expected)), f"installed Anna distributions {installed}, expected {expected}"
leaked = [m for m in json.loads(others) if importlib.util.find_spec(m) is not None]
assert not leaked, f"modules of distributions not installed are importable: {leaked}"
package = importlib.import_module(module)
for info in pkgutil.walk_packages(package.__path__, module + "."):  # every module: no undeclared Anna import
    importlib.import_module(info.name)
records = {r["name"]: r for r in describe_plugins()}
for ep in json.loads(entry_points):
    assert ep in records, f"entry point {ep} of {name} is not loaded (loaded: {sorted(records)})"
    assert records[ep]["distribution"] == name, records[ep]
print(json.dumps({ep: {"hooks": records[ep]["hooks"], "families": [f["name"] for f in records[ep]["families"]]}
                  for ep in json.loads(entry_points)}))
"""


def run(cmd: list[str | Path], *, env: dict[str, str], cwd: Path = ROOT, quiet: bool = True,
        ok: tuple[int, ...] = (0,)) -> str:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, text=True,
                          stdout=subprocess.PIPE if quiet else None, stderr=subprocess.STDOUT if quiet else None)
    if proc.returncode not in ok:
        raise SystemExit(f"dist_check: {' '.join(map(str, cmd))} exited with {proc.returncode}\n{proc.stdout or ''}")
    return proc.stdout or ""


def clean_env() -> dict[str, str]:
    """This environment without what would let a virtualenv see Anna's sources or another interpreter."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")}
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return env


def build_wheels(dists: list[Distribution], work: Path, env: dict[str, str]) -> Path:
    """A wheel of each distribution in ``work/wheels``, built from a copy (so no build/ or egg-info lands in the
    checkout)."""
    wheels, sources = work / "wheels", work / "src"
    junk = shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__")
    for dist in dists:
        shutil.copytree(dist.path, sources / dist.name, ignore=junk)
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", wheels,
         *(sources / d.name for d in dists)], env=env)
    return wheels


def anna_files(purelib: Path) -> set[str]:
    """Top-level entries of ``purelib`` that belong to Anna's distributions (their RECORD files)."""
    names: set[str] = set()
    for dist in importlib.metadata.distributions(path=[str(purelib)]):
        if dist.metadata["Name"].startswith("anna-"):
            for f in dist.files or []:  # its .dist-info folder's own files among them
                names.add(Path(f).parts[0])
    return names


def build_base(work: Path) -> Path:
    """``work/base``: a link to every entry of this interpreter's site-packages except Anna's."""
    purelib = Path(sysconfig.get_paths()["purelib"])
    base = work / "base"
    base.mkdir()
    skip = anna_files(purelib)
    for entry in purelib.iterdir():
        if entry.name not in skip and not entry.name.startswith(("anna_", "__editable__.anna")):
            (base / entry.name).symlink_to(entry)
    return base


def make_venv(path: Path, base: Path, env: dict[str, str]) -> Path:
    """A fresh virtualenv at ``path`` seeing ``base`` after its own site-packages; its python."""
    run([sys.executable, "-m", "venv", "--without-pip", path], env=env)
    python = path / "bin" / "python"
    purelib = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], env=env).strip())
    (purelib / "_anna_base.pth").write_text(f"import site; site.addsitedir({str(base)!r})\n")
    return python


def check(dist: Distribution, dists: dict[str, Distribution], work: Path, wheels: Path, base: Path,
          env: dict[str, str], tests: tuple[str, ...] | None = None, pytest_args: tuple[str, ...] = ()) -> float:
    """Steps 1-4 for ``dist``; ``tests``: the pytest paths of step 4 (default its smoke tests)."""
    start = time.monotonic()
    venv = work / "venvs" / dist.name
    python = make_venv(venv, base, env)
    pip = [python, "-m", "pip", "install", "-q", "--no-index", "--find-links", wheels]
    run([*pip, dist.name], env=env)
    alone = [d.name for d in with_requirements(dist.name, dists)]
    others = [d.module for n, d in dists.items() if n not in alone]
    records = run([python, "-c", CHECK, dist.name, dist.module, json.dumps(alone), json.dumps(dist.entry_points),
                   json.dumps(others)], env=env, cwd=work)
    for script in dist.scripts:
        run([venv / "bin" / script, "--help"], env=env, cwd=work)
    print(f"  {dist.name}: installs alone with {', '.join(alone[:-1]) or 'no other Anna distribution'}; "
          f"plugins {records.strip()}", flush=True)
    if dist.test_fixtures:
        run([*pip, *dist.test_fixtures], env=env)
    tests = dist.smoke_tests if tests is None else tests
    if tests:
        # with selecting pytest arguments (-k, -m) a distribution may have no matching test: pytest's exit 5
        run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args, *tests], env=env, quiet=False,
            ok=(0, 5) if pytest_args else (0,))
    return time.monotonic() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="distributions to check (default: all)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (printed) for a look afterwards")
    parser.add_argument("--all-tests", action="store_true",
                        help="run each distribution's whole test folders (TEST_DIRS), not its smoke tests")
    parser.add_argument("--pytest-args", default="", help="extra pytest arguments, one string (e.g. '-x -m \"not slow\"')")
    args = parser.parse_args(argv)
    dists = distributions()
    chosen = args.names or list(dists)
    unknown = sorted(set(chosen) - set(dists))
    if unknown:
        parser.error(f"unknown distributions {unknown}; known: {sorted(dists)}")
    env = clean_env()
    work = Path(tempfile.mkdtemp(prefix="anna-dist-check-"))
    try:
        start = time.monotonic()
        wheels = build_wheels(list(dists.values()), work, env)
        base = build_base(work)
        print(f"dist_check: wheels and base in {time.monotonic() - start:.0f}s ({work})", flush=True)
        for name in chosen:
            tests = tuple(str(ROOT / t) for t in dists[name].test_dirs) if args.all_tests else None
            seconds = check(dists[name], dists, work, wheels, base, env, tests, tuple(shlex.split(args.pytest_args)))
            print(f"dist_check: {name} passed in {seconds:.0f}s", flush=True)
        print(f"dist_check: {len(chosen)} distributions installed alone, in {time.monotonic() - start:.0f}s")
    finally:
        if args.keep:
            print(f"dist_check: kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
