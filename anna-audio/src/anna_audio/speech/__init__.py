"""The ``speech`` task: text in, audio out (``POST /v1/audio/speech``, ``anna speak``) over a Qwen3-TTS checkpoint."""
