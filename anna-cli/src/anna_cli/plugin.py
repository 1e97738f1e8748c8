"""Entry module of anna-cli (no hooks: the built-in commands live in ``anna_cli.main``)."""
