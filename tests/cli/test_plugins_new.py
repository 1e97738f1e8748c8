"""``anna plugins new``: the files it writes, the names it takes, what it refuses (in-process; the
end-to-end install, conformance run and serving are tests/plugins/test_template_end_to_end.py)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from anna_cli.main import build_cli
from anna_cli.plugins_new import KINDS, module_name, template_files
from click.testing import CliRunner

TEMPLATES = Path(__file__).resolve().parents[2] / "anna-cli" / "src" / "anna_cli" / "templates"


def invoke(*args: str):
    return CliRunner().invoke(build_cli(), list(args), catch_exceptions=False)


@pytest.mark.parametrize("kind", KINDS)
def test_writes_a_plugin_with_every_placeholder_filled(kind, tmp_path):
    result = invoke("plugins", "new", "acme-thing", "--kind", kind, "--dir", str(tmp_path))
    assert result.exit_code == 0, result.output
    root = tmp_path / "acme-thing"
    written = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert "pyproject.toml" in written and "src/acme_thing/plugin.py" in written
    assert any(name.startswith("tests/test_") for name in written)
    for rel in written:
        text = (root / rel).read_text()
        assert "{{" not in text and "}}" not in text.replace("}}}", ""), rel
        if rel.endswith(".py"):
            ast.parse(text, filename=rel)
    pyproject = (root / "pyproject.toml").read_text()
    assert '[project.entry-points.anna]\nacme_thing = "acme_thing.plugin"' in pyproject
    assert 'name = "acme-thing"' in pyproject and '"anna-core"' in pyproject


def test_the_family_template_names_its_family_and_claims_gpt2(tmp_path):
    invoke("plugins", "new", "acme_gpt2", "--dir", str(tmp_path))
    plugin = (tmp_path / "acme_gpt2" / "src" / "acme_gpt2" / "plugin.py").read_text()
    assert 'name="acme_gpt2"' in plugin and 'model_types=("gpt2",)' in plugin
    assert '"acme_gpt2.loader:load"' in plugin and "\nimport torch" not in plugin
    assert 'family = "acme_gpt2"' in (tmp_path / "acme_gpt2" / "tests" / "test_conformance.py").read_text()


@pytest.mark.parametrize("name", ["9lives", "My-Plugin", "has space", "a--b", "trailing-", "x" * 41, "import",
                                  "anna_core", "-dash"])
def test_a_bad_name_is_a_usage_error(name, tmp_path):
    result = CliRunner().invoke(build_cli(), ["plugins", "new", "--dir", str(tmp_path), "--", name])
    assert result.exit_code == 2, result.output
    assert "NAME" in result.output
    assert not any(tmp_path.iterdir())


def test_an_existing_folder_is_never_overwritten(tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("mine")
    result = CliRunner().invoke(build_cli(), ["plugins", "new", "taken", "--dir", str(tmp_path)])
    assert result.exit_code == 1 and "already exists" in result.output
    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["keep.txt"]


def test_anna_plugins_alone_still_prints_the_plugins():
    result = invoke("plugins")
    assert result.exit_code == 0, result.output
    assert any(p["name"] == "anna_cli" for p in json.loads(result.output))
    assert "new" in invoke("plugins", "--help").output


def test_module_names():
    assert module_name("my-gpt2") == "my_gpt2" and module_name("acme_kernels2") == "acme_kernels2"


def test_every_template_file_is_package_data():
    """anna-cli's pyproject ships ``templates/**/*.tmpl``: a template file without the suffix would be left
    out of a wheel (and linted or collected as code here)."""
    assert 'anna_cli = ["templates/**/*.tmpl"]' in (TEMPLATES.parents[2] / "pyproject.toml").read_text()
    stray = [str(p) for p in TEMPLATES.rglob("*") if p.is_file() and p.suffix != ".tmpl"]
    assert not stray, stray
    for kind in KINDS:
        assert len(template_files(kind)) == len(list((TEMPLATES / kind).rglob("*.tmpl")))


def test_the_plugins_group_keeps_the_commands_options():
    """``with_new`` wraps whatever ``anna plugins`` is: its options still work, with and without ``new``."""
    import click
    from anna_cli.plugins_new import with_new

    seen = []

    @click.command("plugins")
    @click.option("--verbose", is_flag=True)
    def plugins(verbose):
        """Print things."""
        seen.append(verbose)

    group = with_new(plugins)
    assert CliRunner().invoke(group, ["--verbose"]).exit_code == 0 and seen == [True]
    assert CliRunner().invoke(group, ["new", "--help"]).exit_code == 0 and seen == [True]
    assert group.help == "Print things."
