"""Qwen3.5 model family for Anna (dense text; MoE and vision-language to come)."""

__version__ = "0.1.0"
