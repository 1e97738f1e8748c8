"""The ``transcribe`` task: speech in, text out.

Modules: :mod:`.request` (the form's fields), :mod:`.windows` (long audio cut at quiet points), :mod:`.asr` (the
model's prompts and output parsing), :mod:`.service` (the :class:`~.service.Transcriber` client: decode, window,
submit, join), :mod:`.aligner` (word timestamps from the forced aligner), :mod:`.formats` (``json``, ``text``,
``verbose_json``, ``srt``, ``vtt``), :mod:`.routes` (``POST /v1/audio/transcriptions``), :mod:`.task` (the
``TaskSpec`` targets), :mod:`.cli` (``anna transcribe``).
"""
