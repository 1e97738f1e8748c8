"""The tiny random Gemma 4 checkpoints live in the package (:mod:`anna_gemma4.tiny`: the family's
``tiny_checkpoint`` builder); the tests import them from here too."""

from anna_gemma4.tiny import LAYOUTS, PLACEHOLDERS, VARIANTS, VOCAB, WINDOW, build_tiny_gemma4, text_config

__all__ = ["LAYOUTS", "PLACEHOLDERS", "VARIANTS", "VOCAB", "WINDOW", "build_tiny_gemma4", "text_config"]
