"""Qwen3-TTS (12 Hz: Base, CustomVoice, VoiceDesign) for Anna: configuration, the codec decoder (codes -> 24 kHz
waveform, batched and streamed), the code predictor, a plain-PyTorch talker with its prompt builder and greedy loop
(the oracle-checked form), and the talker on the engine (``talker_lm``, ``engine_requests``; the family loader in
``loader``)."""

from anna_audio.qwen3_tts.code_predictor import CodePredictor, greedy
from anna_audio.qwen3_tts.codec_decoder import CodecDecoder, StreamingDecoder
from anna_audio.qwen3_tts.config import Qwen3TTSConfig, load_config, parse_config
from anna_audio.qwen3_tts.generate import GeneratedSpeech, generate, generate_greedy
from anna_audio.qwen3_tts.prompt import SpeechRequest, TalkerPrompt, build_prompt
from anna_audio.qwen3_tts.sampling import CodeSampling, SpeechSampling, load_sampling
from anna_audio.qwen3_tts.speaker_encoder import SpeakerEncoder, speaker_mels
from anna_audio.qwen3_tts.talker import Talker
from anna_audio.qwen3_tts.weights import load_code_predictor, load_codec_decoder, load_speaker_encoder, load_talker

__all__ = ["CodePredictor", "CodeSampling", "CodecDecoder", "GeneratedSpeech", "Qwen3TTSConfig", "SpeakerEncoder", "SpeechRequest", "SpeechSampling", "StreamingDecoder",
           "Talker", "TalkerPrompt", "build_prompt", "generate", "generate_greedy", "greedy", "load_code_predictor",
           "load_codec_decoder", "load_config", "load_sampling", "load_speaker_encoder", "load_talker", "parse_config",
           "speaker_mels"]
