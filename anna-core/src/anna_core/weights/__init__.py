"""Weight loading: safetensors (lazy, sharded, meta-device assign) and, later, GGUF."""
