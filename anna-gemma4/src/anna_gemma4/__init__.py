"""anna_gemma4: installable skeleton; registers nothing yet."""

__version__ = "0.1.0"
