"""Entry module of anna-llama (filled in by the family implementation)."""
