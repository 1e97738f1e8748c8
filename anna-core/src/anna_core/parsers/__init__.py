"""Output parsers: reasoning (``<think>`` blocks) and tool calls, registered through the
``register_output_parsers`` hook. See :mod:`anna_core.parsers.base` for the interfaces."""
