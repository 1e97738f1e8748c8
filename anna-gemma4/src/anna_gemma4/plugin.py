"""Entry module of anna_gemma4. It implements no hooks yet (see the package README)."""
