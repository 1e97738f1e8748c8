"""``anna plugins``: every loaded plugin, its distribution, version and hooks, as JSON."""

from __future__ import annotations

import json

import click


@click.command("plugins")
def plugins() -> None:
    """Print the installed Anna plugins as JSON."""
    from anna_core.plugins import describe_plugins

    click.echo(json.dumps(describe_plugins(), indent=2))
