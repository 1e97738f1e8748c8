"""Entry module of anna-cli: adds ``anna bench-serve`` through the ``register_commands`` hook.

The other built-in commands live in ``anna_cli.main``. The command module is imported inside the
hook, so loading this plugin stays cheap.
"""

from anna_core.hookspecs import hookimpl


@hookimpl
def register_commands(cli):
    from anna_cli.bench_serve import bench_serve

    cli.add_command(bench_serve, "bench-serve")
