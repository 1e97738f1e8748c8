"""The Gemma 3 text family (``gemma3`` / ``gemma3_text`` checkpoints and ``gemma3`` GGUF files)."""
