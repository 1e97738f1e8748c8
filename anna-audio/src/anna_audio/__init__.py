"""anna_audio: speech for Anna: audio I/O, log-mel features and the Qwen3-ASR family (:mod:`anna_audio.qwen3_asr`)."""

__version__ = "0.1.0"
