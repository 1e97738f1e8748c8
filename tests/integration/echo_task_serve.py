"""``python -m tests.integration.echo_task_serve serve ...``: the real ``anna`` CLI with the test-only echo
family and task (:mod:`tests.server.echo_task`) registered into the process's plugin manager first."""

from anna_cli.main import main
from anna_core.plugins import get_plugin_manager

from tests.server.echo_task import register_echo

if __name__ == "__main__":
    register_echo(get_plugin_manager())
    main()
