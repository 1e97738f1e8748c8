"""The ``anna`` command group: built-in commands plus those plugins add (``register_commands``)."""

from __future__ import annotations

import signal
import sys

import click

from anna_cli import __version__


def build_cli(pm=None) -> click.Group:
    """A fresh ``anna`` group with the built-in commands and every plugin's commands.

    Args:
        pm: plugin manager (default: the process-wide one, honouring ``ANNA_LOAD_PLUGINS``).
    """

    @click.group(context_settings={"help_option_names": ["-h", "--help"]})
    @click.version_option(__version__, prog_name="anna")
    def anna() -> None:
        """Anna: serve and run language models with PyTorch."""

    from anna_cli.bench import bench
    from anna_cli.generate import generate
    from anna_cli.plugins_cmd import plugins
    from anna_cli.plugins_new import with_new
    from anna_cli.quant_cache import quant_cache
    from anna_cli.serve import serve
    from anna_cli.speak import speak
    from anna_cli.transcribe import transcribe

    for command in (generate, serve, bench, transcribe, speak, with_new(plugins), quant_cache):
        anna.add_command(command)
    try:
        from anna_core.plugins import get_plugin_manager, tasks

        from anna_cli.task_options import add_task_options

        manager = pm or get_plugin_manager()
        add_task_options(serve, tasks(manager))  # --asr-aligner-dir, ...: the installed tasks' settings
        manager.hook.register_commands(cli=anna)
    except Exception as exc:  # a broken plugin must not take the built-in commands down with it
        click.echo(f"warning: a plugin failed to add its commands: {type(exc).__name__}: {exc}", err=True)
    return anna


def main(argv: list[str] | None = None) -> None:
    """Console entry point (``anna``).

    ``anna serve`` started with SIGINT ignored (the background job of a script inherits it so) takes SIGINT back
    first: the server drains on SIGINT once it listens, so a SIGINT during its start (imports, checks) stops it too
    (``interrupted``, exit code 130) instead of being lost."""
    args = argv if argv is not None else sys.argv[1:]
    if args[:1] == ["serve"] and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        cli = build_cli()
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    cli.main(args=args, prog_name="anna")


if __name__ == "__main__":
    main()
