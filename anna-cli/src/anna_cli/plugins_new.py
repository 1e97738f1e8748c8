"""``anna plugins new NAME``: write a ready-to-install plugin folder from one of anna-cli's templates.

The templates are package data (``anna_cli/templates/<kind>/``): every file ends in ``.tmpl``, which is
dropped, and ``{{name}}`` (the distribution name, also the family / kernel name) and ``{{module}}`` (its
import name) are replaced in file names and contents by plain string replacement.
"""

from __future__ import annotations

import keyword
import re
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

import click

KINDS = ("family", "kernel")
SUFFIX = ".tmpl"
NAME_PATTERN = re.compile(r"[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*")
"""Lower-case letters and digits, words joined by single ``-`` or ``_``, starting with a letter."""
MAX_NAME = 40  # the templates' lines stay within 120 characters


def module_name(name: str) -> str:
    """The import name of distribution ``name`` (``anna-gpt2`` -> ``anna_gpt2``).

    Raises:
        ValueError: ``name`` is not a plugin name (:data:`NAME_PATTERN`), or its import name is a
            Python keyword or an existing top-level module Anna depends on.
    """
    if not NAME_PATTERN.fullmatch(name) or len(name) > MAX_NAME:
        raise ValueError(f"{name!r} is not a plugin name: use lower-case letters and digits, words joined by "
                         f"'-' or '_', starting with a letter, at most {MAX_NAME} characters (e.g. my-gpt2)")
    module = name.replace("-", "_")
    if not module.isidentifier() or module in _RESERVED:
        raise ValueError(f"{name!r} would be imported as {module!r}, which is taken; pick another name")
    return module


_RESERVED = frozenset({"anna", "anna_core", "anna_cli", "torch", "transformers", "tests", "test", *keyword.kwlist})


def template_files(kind: str) -> dict[str, str]:
    """``{relative path with placeholders: text}`` of template ``kind`` (``family`` or ``kernel``)."""
    root = files("anna_cli").joinpath("templates", kind)
    out: dict[str, str] = {}

    def walk(node: Traversable, prefix: str) -> None:
        for child in sorted(node.iterdir(), key=lambda c: c.name):
            rel = f"{prefix}{child.name}"
            if child.is_dir():
                walk(child, rel + "/")
            elif child.name.endswith(SUFFIX):
                out[rel.removesuffix(SUFFIX)] = child.read_text(encoding="utf-8")

    walk(root, "")
    return out


def render(kind: str, name: str, parent: Path) -> Path:
    """Write plugin ``name`` from template ``kind`` into ``parent/name``; returns that folder.

    Raises:
        ValueError: an unknown kind or a bad name (:func:`module_name`).
        FileExistsError: ``parent/name`` exists (nothing is overwritten).
    """
    if kind not in KINDS:
        raise ValueError(f"unknown plugin kind {kind!r}; use one of {KINDS}")
    module = module_name(name)
    target = Path(parent) / name
    if target.exists():
        raise FileExistsError(f"{str(target)!r} already exists; remove it or choose another --dir")

    def fill(text: str) -> str:
        return text.replace("{{name}}", name).replace("{{module}}", module)

    templates = template_files(kind)
    target.mkdir(parents=True)
    for rel, text in templates.items():
        path = target / fill(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(fill(text), encoding="utf-8")
    return target


@click.command("new")
@click.argument("name")
@click.option("--kind", type=click.Choice(KINDS), default="family", show_default=True,
              help="family: a GPT-2 model family with its conformance tests; kernel: an rms_norm implementation.")
@click.option("--dir", "parent", type=click.Path(file_okay=False, path_type=Path), default=Path("."),
              show_default=True, help="Folder to create the plugin folder NAME/ in.")
def new(name: str, kind: str, parent: Path) -> None:
    """Write a new plugin NAME (a distribution name, e.g. my-gpt2) from a template, ready for pip install -e."""
    try:
        target = render(kind, name, parent)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="NAME") from exc
    except FileExistsError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"wrote the {kind} plugin {name} to {target}")
    click.echo(f"next: pip install -e {target} && anna plugins && python -m pytest {target / 'tests'}")


def with_new(plugins: click.Command) -> click.Group:
    """The ``plugins`` command as a group: ``anna plugins`` runs it as before, ``anna plugins new`` adds a plugin.

    Its options and help are kept, so the command itself can change without this module."""

    def callback(**kwargs):
        ctx = click.get_current_context()
        if ctx.invoked_subcommand is None:
            return ctx.invoke(plugins.callback, **kwargs)
        return None

    group = click.Group(plugins.name, commands={"new": new}, callback=callback, params=list(plugins.params),
                        help=plugins.help, short_help=plugins.short_help, invoke_without_command=True)
    return group
