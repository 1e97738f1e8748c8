"""anna_audio: installable skeleton; registers nothing yet."""

__version__ = "0.1.0"
