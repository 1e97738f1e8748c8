"""The tiny random Gemma 3 checkpoints live in the package (:mod:`anna_gemma4.gemma3.tiny`: the family's
``tiny_checkpoint`` builder); the tests import them from here too."""

from anna_gemma4.gemma3.tiny import IMAGE_TOKEN, LAYOUTS, VOCAB, WINDOW, build_tiny_gemma3, text_config

__all__ = ["IMAGE_TOKEN", "LAYOUTS", "VOCAB", "WINDOW", "build_tiny_gemma3", "text_config"]
