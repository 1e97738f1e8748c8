"""The plugin author's path, end to end (slow: about half a minute): ``anna plugins new`` writes a GPT-2 family
plugin and a kernel plugin into a temporary folder outside the repository; they install with
``pip install -e`` (offline) into a fresh virtualenv layered on this interpreter's packages; in that
virtualenv ``anna plugins`` lists them, their own tests pass (the family conformance suite against HF
transformers, the kernel against its op's reference) and ``anna serve`` serves a tiny GPT-2 with the family.

The virtualenv reaches anna-core and the third-party dependencies through a ``.pth`` file that adds this
interpreter's site-packages. ``python -m venv --system-site-packages`` would not do: run from a virtualenv,
it exposes the *base* interpreter's site-packages, not this virtualenv's. Anna's own distributions are
found as this interpreter finds them (its editable installs, or ``PYTHONPATH``, which the subprocesses
inherit); the plugins are installed into the new virtualenv only.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import httpx
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]
FAMILY, KERNEL = "tutorial-gpt2", "tutorial-kernels"


def run(cmd: list[str | Path], cwd: Path, timeout: float = 300) -> str:
    """Run ``cmd`` offline; its combined output, or a failure quoting it."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PIP_NO_INDEX": "1",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTEST_ADDOPTS", None)
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} exited with {proc.returncode}:\n{output[-6000:]}"
    return output


def layered_venv(path: Path) -> Path:
    """A fresh virtualenv at ``path`` that also sees this interpreter's site-packages; its python."""
    run([sys.executable, "-m", "venv", "--without-pip", path], cwd=path.parent)
    python = path / "bin" / "python"
    purelib = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], path).strip())
    ours = [*site.getsitepackages(), sysconfig.get_paths()["purelib"]]
    lines = "".join(f"site.addsitedir({p!r}); " for p in dict.fromkeys(ours))
    (purelib / "_anna_base_env.pth").write_text(f"import site; {lines}\n")
    return python


def test_a_new_plugin_installs_passes_conformance_and_is_served(tmp_path_factory):
    for module in ("pip", "setuptools"):  # pip install -e --no-build-isolation builds with this environment's
        assert importlib.util.find_spec(module), f"{module} is not installed (.ci/requirements-dev.txt has it)"
    work = tmp_path_factory.mktemp("plugin-author")
    assert not work.resolve().is_relative_to(REPO), "the plugins must be made outside the repository"
    python = layered_venv(work / "venv")

    # `python -m anna_cli.main` is the `anna` command run by the new virtualenv's interpreter (anna-cli's console
    # script belongs to the base environment, whose interpreter would not see the plugins installed here)
    run([python, "-m", "anna_cli.main", "plugins", "new", FAMILY, "--dir", work], cwd=work)
    run([python, "-m", "anna_cli.main", "plugins", "new", KERNEL, "--kind", "kernel", "--dir", work], cwd=work)
    ruff = Path(sys.executable).with_name("ruff")
    for name in (FAMILY, KERNEL):
        if ruff.is_file():  # the templates lint clean under the generated pyproject's ruff settings
            run([ruff, "check", "--no-cache", "."], cwd=work / name)
    run([python, "-m", "pip", "install", "--no-index", "--no-deps", "--no-build-isolation",
         "-e", work / FAMILY, "-e", work / KERNEL], cwd=work)

    listed = {p["name"]: p for p in json.loads(run([python, "-m", "anna_cli.main", "plugins"], cwd=work))}
    assert listed["tutorial_gpt2"]["distribution"] == FAMILY
    assert "register_model_families" in listed["tutorial_gpt2"]["hooks"]
    assert "register_kernels" in listed["tutorial_kernels"]["hooks"]
    assert run([sys.executable, "-c", "import importlib.util as u; print(u.find_spec('tutorial_gpt2'))"],
               cwd=work).strip() == "None", "the plugin must be installed into the new virtualenv only"

    # outside the repository, and --confcutdir keeps pytest from looking for conftest.py files above `work`
    tests = run([python, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-W", "ignore::DeprecationWarning",
                 "--confcutdir", work, work / FAMILY / "tests", work / KERNEL / "tests"], cwd=work)
    passed = re.search(r"(\d+) passed", tests)
    assert passed and int(passed[1]) >= 20 and " failed" not in tests, tests  # the suite ran, none failed

    checkpoint = work / "tiny-gpt2"
    run([python, "-m", "tutorial_gpt2.tiny", checkpoint], cwd=work)
    from anna_core.testing.live_server import start_server

    server = start_server(["--model-dir", str(checkpoint), "--model-name", "tiny-gpt2", "--max-model-len", "256"],
                          work, checkpoint, python=python, cwd=work)
    try:
        body = {"model": "tiny-gpt2", "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 5,
                "temperature": 0}
        answer = httpx.post(f"{server.base_url}/v1/chat/completions", json=body, timeout=60)
        assert answer.status_code == 200, answer.text + server.log()
        assert answer.json()["usage"]["completion_tokens"] >= 1
        health = httpx.get(f"{server.base_url}/healthz", timeout=10).json()
        assert health["family"] == FAMILY, health
    finally:
        try:
            server.stop()
        finally:
            server.kill()  # only if it did not stop
    shutil.rmtree(work / "venv", ignore_errors=True)
