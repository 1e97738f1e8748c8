"""Entry module of anna_audio. It implements no hooks yet (see the package README)."""
