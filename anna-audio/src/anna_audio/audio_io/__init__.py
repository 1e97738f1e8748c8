"""Audio uploads -> the 16 kHz mono float32 waveform the speech models take.

:func:`decode_audio` identifies the container from its first bytes (never from a file name or a client's content
type), checks that it is whole, decodes it (libsndfile through ``soundfile`` for WAV, FLAC, Ogg Vorbis / Opus and
MP3; FFmpeg through PyAV for MP4 / M4A, WebM / Matroska and ADTS AAC), averages the channels and resamples to
16 kHz with soxr, block by block, within :class:`AudioLimits`. Every refusal is an
:class:`~anna_core.errors.InvalidRequestError` (HTTP 400, ``param`` ``"file"``) naming the reason.

Modules: :mod:`.containers` (sniffing and completeness checks), :mod:`.backends` (the two decoders, as blocks of
samples), :mod:`.resample` (downmix and resampling), :mod:`.decode` (the entry point and its limits),
:mod:`.errors` (the refusal).
"""

from anna_audio.audio_io.containers import FORMATS
from anna_audio.audio_io.decode import AudioLimits, DecodedAudio, decode_audio
from anna_audio.audio_io.resample import TARGET_RATE

__all__ = ["FORMATS", "TARGET_RATE", "AudioLimits", "DecodedAudio", "decode_audio"]
