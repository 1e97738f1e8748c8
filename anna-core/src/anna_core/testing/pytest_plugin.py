"""Pytest plugin shipped to plugin authors (registered as the ``pytest11`` entry point ``anna_core``).

Session-scoped fixtures that build tiny random checkpoints once per test session.
"""
