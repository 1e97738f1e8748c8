"""docs/tutorial-family-plugin.md stays true to the CLI and the template: every ``anna`` command in its
shell blocks names commands and options that exist (and choices they accept), every file it says
``anna plugins new`` writes is in the template, and its links resolve."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
from anna_cli.main import build_cli
from anna_cli.plugins_new import template_files

DOCS = Path(__file__).resolve().parents[2] / "docs"
TUTORIAL = DOCS / "tutorial-family-plugin.md"


def shell_commands(text: str) -> list[list[str]]:
    """The ``anna ...`` commands of the ```bash blocks (line continuations joined, comments dropped)."""
    out = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, flags=re.M | re.S):
        for line in block.replace("\\\n", " ").splitlines():
            for part in re.split(r"&&|\|\|", line.split(" #")[0]):
                words = shlex.split(part)
                if words and words[0] == "anna":
                    out.append(words)
    return out


def test_every_anna_command_in_the_tutorial_parses():
    commands = shell_commands(TUTORIAL.read_text())
    assert len(commands) >= 4 and ["anna", "plugins"] in commands
    for words in commands:
        command: click.Command = build_cli()
        args = words[1:]
        while isinstance(command, click.Group) and args and not args[0].startswith("-"):
            assert args[0] in command.commands, f"{' '.join(words)}: no command {args[0]!r}"
            command, args = command.commands[args[0]], args[1:]
        options = {name: p for p in command.params if isinstance(p, click.Option) for name in p.opts + p.secondary_opts}
        for i, arg in enumerate(args):
            if arg.startswith("--"):
                name = arg.split("=")[0]
                assert name in options, f"{' '.join(words)}: {command.name} has no option {name}"
                choice = options[name].type
                if isinstance(choice, click.Choice) and not options[name].is_flag:
                    assert args[i + 1] in choice.choices, f"{' '.join(words)}: {args[i + 1]!r} not in {choice.choices}"


def test_the_files_the_tutorial_lists_are_the_templates():
    tree = re.search(r"^```text\nmy-gpt2/\n(.*?)^```", TUTORIAL.read_text(), flags=re.M | re.S)[1]
    listed = {m[1] for m in re.finditer(r"[─ ]([\w.]+\.(?:py|toml|md))\b", tree)}
    written = {Path(rel).name for rel in template_files("family")}
    assert listed == written


def test_the_tutorial_links_resolve():
    for target in re.findall(r"\]\(([^)#\s]+\.md)(?:#([\w-]+))?\)", TUTORIAL.read_text()):
        path, anchor = DOCS / target[0], target[1]
        assert path.is_file(), target
        if anchor:
            headings = {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-")
                        for h in re.findall(r"^#+ (.*)$", path.read_text(), flags=re.M)}
            assert anchor in headings, f"{target[0]} has no heading #{anchor}"
    assert "(tutorial-family-plugin.md)" in (DOCS / "plugins.md").read_text(), "docs/plugins.md should link it"
