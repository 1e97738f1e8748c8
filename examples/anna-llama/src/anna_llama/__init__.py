"""anna-llama: an example third-party Anna family plugin for Llama-architecture checkpoints."""

__version__ = "0.1.0"
