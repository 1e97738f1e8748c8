"""Language names as OpenAI's ``language`` fields send them: ISO 639-1 codes (``"en"``) or English names, shared by
speech recognition (:mod:`anna_audio.qwen3_asr.prompt`) and synthesis (:mod:`anna_audio.qwen3_tts.prompt`)."""

from __future__ import annotations

LANGUAGE_CODES = {
    "ar": "Arabic", "yue": "Cantonese", "zh": "Chinese", "cs": "Czech", "da": "Danish", "nl": "Dutch",
    "en": "English", "fil": "Filipino", "tl": "Filipino", "fi": "Finnish", "fr": "French", "de": "German",
    "el": "Greek", "hi": "Hindi", "hu": "Hungarian", "id": "Indonesian", "it": "Italian", "ja": "Japanese",
    "ko": "Korean", "mk": "Macedonian", "ms": "Malay", "fa": "Persian", "pl": "Polish", "pt": "Portuguese",
    "ro": "Romanian", "ru": "Russian", "es": "Spanish", "sv": "Swedish", "th": "Thai", "tr": "Turkish",
    "vi": "Vietnamese",
}
"""ISO 639-1 (``yue``, ``fil``: 639-3) codes of the languages Qwen3-ASR and Qwen3-TTS name, mapped to the English
names their checkpoints use."""


def english_name(name: str) -> str:
    """The lower-case English name of ``name`` (an ISO code from :data:`LANGUAGE_CODES`, or already a name, in any
    case): ``"EN"`` and ``"English"`` give ``"english"``; an unknown code comes back lower-cased, for the caller to
    refuse."""
    key = str(name).strip().lower()
    return LANGUAGE_CODES.get(key, key).lower()
